"""A small ONNX graph writer that streams weights to an external data file.

Initializers are written to ``<model>.onnx.data`` as soon as they are added and then
dropped from memory, so building a model needs about one tensor's worth of RAM beyond
what the checkpoint reader holds (memory-mapped for safetensors, in memory for CTranslate2).
The graph protobuf itself only holds references.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
_ALIGN = 4096
_INLINE_LIMIT = 256  # bytes; smaller constants live inside the graph


class GraphWriter:
    def __init__(self, path: Path, name: str) -> None:
        self.path = path
        self.name = name
        self.data_name = path.name + ".data"
        self._data = open(path.with_name(self.data_name), "wb")  # noqa: SIM115
        self._offset = 0
        self._counter = 0
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []

    def _fresh(self, hint: str) -> str:
        self._counter += 1
        return f"{hint}_{self._counter}"

    def weight(self, array: np.ndarray, name: str | None = None) -> str:
        """Add a constant tensor; large ones go to the external data file right away."""
        name = name or self._fresh("w")
        array = np.asarray(array, order="C")
        if array.nbytes <= _INLINE_LIMIT:
            self.initializers.append(numpy_helper.from_array(array, name))
            return name
        pad = (-self._offset) % _ALIGN
        if pad:
            self._data.write(b"\0" * pad)
            self._offset += pad
        self._data.write(array.tobytes())
        tensor = TensorProto()
        tensor.name = name
        tensor.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
        tensor.dims.extend(array.shape)
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (
            ("location", self.data_name),
            ("offset", str(self._offset)),
            ("length", str(array.nbytes)),
        ):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        self._offset += array.nbytes
        self.initializers.append(tensor)
        return name

    def const(self, value: float | int | list, dtype: type = np.int64) -> str:
        return self.weight(np.asarray(value, dtype=dtype))

    def op(
        self, op_type: str, *inputs: str, outputs: int = 1, domain: str = "", **attrs
    ) -> str | list[str]:
        names = [self._fresh(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(
            helper.make_node(op_type, list(inputs), names, domain=domain or None, **attrs)
        )
        return names[0] if outputs == 1 else names

    def identity(self, value: str, name: str) -> str:
        self.nodes.append(helper.make_node("Identity", [value], [name]))
        return name

    def add_input(self, name: str, elem_type: int, shape: list) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    def add_output(self, name: str, elem_type: int, shape: list) -> None:
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, shape))

    def save(self) -> None:
        self._data.flush()
        os.fsync(self._data.fileno())
        self._data.close()
        graph = helper.make_graph(
            self.nodes, self.name, self.inputs, self.outputs, self.initializers
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)],
            producer_name="deskscribe",
        )
        model.ir_version = 8
        with open(self.path, "wb") as fh:
            fh.write(model.SerializeToString())
            fh.flush()
            os.fsync(fh.fileno())
        onnx.checker.check_model(str(self.path))

    def abort(self) -> None:
        self._data.close()
