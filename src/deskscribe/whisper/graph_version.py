"""The version of the graphs ``graph.py`` builds, apart from it: loading a built model checks
it, and that must not import the ``onnx`` package (about half a second of start-up, which
only building needs)."""

GRAPH_VERSION = 9  # bump when the graphs change

# Versions whose folders this code loads. A bump makes every user rebuild (or download again)
# every model unless the older graphs still run: 8 changed only the layout of the CPU
# variants' cross K/V, which the encoder writes and the decoder reads inside one folder, and
# nothing outside the graphs reads it, so a folder built by 7 runs as it was built; 9 merged
# the CPU variants' self-attention projections into one matmul inside the decoder (the same
# inputs and outputs, in int8 the same numbers).
READABLE_VERSIONS = frozenset({7, 8, 9})
