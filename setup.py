"""Build script for the one compiled part: the udp agent's batched socket calls (``producers._udpbatch``).

Everything else is in pyproject.toml. The extension is optional: where no C compiler or Python headers
exist, the install goes on without it and the agent uses its pure-Python socket path (the same
protocol, one system call per datagram; ``fabricscope agent`` says which one runs).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("producers._udpbatch", ["producers/_udpbatch.c"], optional=True,
                             extra_compile_args=["-O2", "-Wall"])])
