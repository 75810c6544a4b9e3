"""io: the files dpsynrag reads and writes, on the lowest floor.

The private input's records (one reader per format, shared by ``build-corpus``'s in-process
reader and the Beam ingest), their ids and unit bounding, the owner-only file writer, and the
names and hashes of a build's output files. Imports nothing else from dpsynrag.
"""
