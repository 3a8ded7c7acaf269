"""fmtfs: binary append-only formats shown as JSON Lines and Parquet through FUSE."""

__version__ = "0.1.0"
