"""Replay: reverb tables, adders that write to them, and iterators that read batches."""
