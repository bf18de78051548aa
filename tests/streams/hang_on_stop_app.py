"""A Faust app on :class:`streams.runtime.bounded_stop.BoundedStopWorker` whose one service never finishes its
stop (argv: bootstrap, stop deadline s, app id, data dir): tests/streams/test_bounded_stop.py runs it."""
import asyncio
import sys

import faust
import mode

from streams.runtime.bounded_stop import BoundedStopWorker

bootstrap, deadline, app_id, datadir = sys.argv[1:5]


class Worker(BoundedStopWorker):
    stop_deadline_s = float(deadline)


app = faust.App(app_id, broker=f"kafka://{bootstrap}", web_enabled=False, store="memory://", datadir=datadir,
                topic_allow_declare=False, Worker=Worker)


@app.service
class HangsOnStop(mode.Service):
    async def on_started(self) -> None:
        print("started", flush=True)

    async def on_stop(self) -> None:
        print("stopping", flush=True)
        await asyncio.sleep(3600)


sys.argv = [sys.argv[0], "--quiet", "worker", "-l", "warn", "--without-web"]
app.main()
