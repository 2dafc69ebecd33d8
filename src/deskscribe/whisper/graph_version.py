"""The version of the graphs ``graph.py`` builds, apart from it: loading a built model checks
it, and that must not import the ``onnx`` package (about half a second of start-up, which
only building needs)."""

GRAPH_VERSION = 7  # bump when the graphs change: built models must be rebuilt
