"""Where an export's bytes come from: local paths, or object stores through one client layer.

In: a path or a URL (`s3://BUCKET/PREFIX`, `gs://`, `az://`, `http(s)://`). Out: what the
adapters need to read an export wherever it lives: a listing (`walk`), sizes, and files to
read, streamed (`open_stream`) or seekable over range requests (`open_seekable`), with every
request counted (`accounting`). Also the local S3-compatible server the demo and the tests use
(`server`), and the storage probe (`probe`). May import: the foundation modules only.
"""
