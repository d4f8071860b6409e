"""Surrogate models, one per file (history baselines, LSTM, DCRNN, SMART)."""
