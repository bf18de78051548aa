"""The host agent loads librdkafka's compiled client alone (producers.kafka_producer.kafka_client).

Run in fresh interpreters: the test process has the whole confluent_kafka package imported already.
"""

from __future__ import annotations

import json
import subprocess
import sys

AGENT_ALONE = """
import json, sys
import producers.udp_agent
from producers.kafka_producer import KafkaError, KafkaException, Producer
heavy = sorted(m for m in ("confluent_kafka", "asyncio", "ssl", "subprocess") if m in sys.modules)
import confluent_kafka
same = [Producer is confluent_kafka.Producer, KafkaError is confluent_kafka.KafkaError,
        KafkaException is confluent_kafka.KafkaException]
print(json.dumps({"heavy": heavy, "same": same, "module": Producer.__module__}))
"""

PACKAGE_FIRST = """
import json
import confluent_kafka
from producers.kafka_producer import Producer, kafka_client
print(json.dumps({"same": Producer is confluent_kafka.Producer,
                  "module": kafka_client() is confluent_kafka.cimpl}))
"""


def _run(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_agent_imports_no_serialisation_layers_and_the_package_reuses_its_client() -> None:
    got = _run(AGENT_ALONE)
    assert got["heavy"] == []  # no package __init__, so no asyncio, ssl or subprocess in the agent
    assert got["same"] == [True, True, True]  # a later `import confluent_kafka` re-exports the same classes
    assert got["module"] == "cimpl"


def test_a_process_that_imported_the_package_first_gets_the_package_client() -> None:
    assert _run(PACKAGE_FIRST) == {"same": True, "module": True}
