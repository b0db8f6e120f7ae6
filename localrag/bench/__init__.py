"""Benchmarks: ``python -m localrag bench <suite> ...`` (ratios measured in one process).

A small library, ``data`` (the datasets, as typed rows) and ``common`` (timing, interleaving,
scoring, cached answers, tables and JSON), and one module per suite (``speed`` has three helpers:
``speed_report``, ``speed_peer``, ``speed_hf``); ``cli`` registers the suites' commands.
"""
