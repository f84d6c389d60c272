"""Offline fitting: the learned scorer and quality heads (numpy), the labelled data they
are fitted on, and threshold calibration. Never imported when serving: only `gateway
route train` / `calibrate` / `heads` and the scripts that build the shipped weights."""
