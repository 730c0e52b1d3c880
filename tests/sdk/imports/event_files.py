"""Real TensorBoard event files for the import tests, written by tensorboardX: TF1-style
``add_scalar`` (``simple_value``) and, through the same writer, TF2/PyTorch-style scalar
tensors (``float_val``, ``double_val``, ``tensor_content``) tagged for the scalars plugin."""

import struct
from pathlib import Path

import numpy as np
from tensorboardX import SummaryWriter
from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboardX.proto.tensor_pb2 import TensorProto

SCALARS_PLUGIN = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
DT_FLOAT, DT_DOUBLE = 1, 2


def tensor_scalar(
    writer: SummaryWriter, tag: str, tensor: TensorProto, step: int, when: float
) -> None:
    """Write one scalar as TF2's ``tf.summary.scalar`` does: a tensor for the scalars plugin."""
    value = Summary.Value(tag=tag, tensor=tensor, metadata=SCALARS_PLUGIN)
    writer._get_file_writer().add_summary(
        Summary(value=[value]), step, when
    )  # its framing, its CRCs


def write_run(directory: Path, steps: range, *, start: float, suffix: str = "") -> None:
    """A run with ``loss`` (simple_value), ``lr`` (float_val), ``acc/top1`` (double
    tensor_content) at each step, plus a histogram, a text and an image per step."""
    writer = SummaryWriter(str(directory), flush_secs=3600, filename_suffix=suffix)
    for step in steps:
        when = start + step
        writer.add_histogram("weights", np.arange(10.0), step, walltime=when)
        writer.add_text("note", f"step {step}", step, walltime=when)
        image = Summary.Image(height=1, width=1, colorspace=1, encoded_image_string=b"png")
        summary = Summary(value=[Summary.Value(tag="sample", image=image)])
        writer._get_file_writer().add_summary(summary, step, when)  # no PIL needed
        writer.add_scalar("loss", 1.0 / (step + 1), step, walltime=when)
        tensor_scalar(writer, "lr", TensorProto(dtype=DT_FLOAT, float_val=[0.5 * step]), step, when)
        content = struct.pack("<d", step / 1000.0)
        tensor_scalar(
            writer, "acc/top1", TensorProto(dtype=DT_DOUBLE, tensor_content=content), step, when
        )
    writer.close()


def expected_values(metric: str, step: int) -> float:
    """The value :func:`write_run` wrote for ``metric`` at ``step``, as float32 where stored so."""
    if metric == "loss":
        return float(np.float32(1.0 / (step + 1)))
    if metric == "lr":
        return float(np.float32(0.5 * step))
    return step / 1000.0
