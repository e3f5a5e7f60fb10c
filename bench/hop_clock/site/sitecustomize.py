"""Installs ``bench hops``'s stage clock in a worker it starts (bench/hop_clock)."""

import os

if os.environ.get("SWITCHYARD_BENCH_HOP_STAMPS"):
    from bench.hop_clock import STAMPS_ENV, install

    install(os.environ[STAMPS_ENV])
