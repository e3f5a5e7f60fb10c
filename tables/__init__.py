"""Changelog-backed Faust tables (RocksDB through rocksdict)."""
