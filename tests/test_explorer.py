"""Chapter 1's sharding explorer: its callback, ``shardbook.explorer.explore``,
without a browser.

* A dividing choice gives the shard table, and every row of it (each device's slice,
  shard shape and bytes) matches what the PartitionSpec alone predicts, computed here
  independently of the explorer.
* A choice that does not divide, an axis name missing from the mesh and a mesh larger
  than the device count each give a message that says what is wrong and how to fix it.
* Planted bugs: a callback that silently replicates is caught by this file's table
  check, and a placement that silently replicates is refused by ``explore`` itself.
"""

import re

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from shardbook import book, explorer, shards

N = len(book.devices())
ROW = re.compile(r"^\s*(\d+)\s+\[([^\]]*)\]\s+\(([^)]*)\)\s+([\d,]+)\s+(\d+)$")


def table_rows(text):
    """{device: (slices, shape, bytes)} from the explorer's shard table."""
    rows = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            shape = tuple(int(v) for v in m.group(3).split(",") if v.strip())
            nbytes = int(m.group(4).replace(",", ""))
            rows[int(m.group(1))] = (m.group(2), shape, nbytes)
    return rows


def predicted_rows(shape, rows, cols, spec):
    """The table a (rows x cols) mesh ('batch', 'neuron') gives for ``spec`` (entries
    None, 'batch' or 'neuron'), written out by hand: device (r, c) is number
    r * cols + c, and a dimension split k ways holds block r or c of it."""
    out = {}
    for r in range(rows):
        for c in range(cols):
            parts, block = [], []
            for length, entry in zip(shape, list(spec) + [None] * len(shape)):
                split = {None: (1, 0), "batch": (rows, r), "neuron": (cols, c)}
                ways, at = split[entry]
                step = length // ways
                parts.append(":" if ways == 1 else f"{at * step}:{(at + 1) * step}")
                block.append(step)
            dev = book.devices()[r * cols + c].id
            out[dev] = (", ".join(parts), tuple(block), int(np.prod(block)) * 4)
    return out


def assert_table_matches(text, shape, rows, cols, spec):
    got, want = table_rows(text), predicted_rows(shape, rows, cols, spec)
    assert got == want, f"table\n{text}\nexpected rows {want}"


@pytest.mark.parametrize("spec", [("batch", "neuron"), (None, "neuron"), ("batch",)])
def test_a_dividing_choice_gives_the_table_of_its_spec(spec):
    choice = explorer.default_choice()
    rows, cols = book.mesh_shape_2d(N)
    assert choice["mesh"] == {"batch": rows, "neuron": cols}
    text = explorer.explore(choice["shape"], choice["mesh"], spec)
    assert_table_matches(text, choice["shape"], rows, cols, spec)
    assert "checked: every device holds the slice the spec gives it" in text
    assert "cannot" not in text


def test_the_default_choice_divides_at_every_device_count():
    for n in (1, 2, 3, 4, 7, 8, 9, 11, 32):
        choice = explorer.default_choice(n)
        assert np.prod(list(choice["mesh"].values())) == n
        for length, axis in zip(choice["shape"], choice["spec"]):
            assert length % choice["mesh"][axis] == 0, (n, choice)


@pytest.mark.skipif(N < 2, reason="with one device every size divides")
def test_a_non_dividing_choice_says_what_and_how_to_fix():
    bad = 4 * N + 1
    text = explorer.explore((bad, 3), {"batch": N}, ("batch",))
    assert "cannot be placed" in text and "device  slices" not in text  # no table
    flat = " ".join(text.split())
    assert f"dimension 0 has {bad} elements" in flat
    assert f"mesh axis 'batch' spreads it over {N} devices" in flat
    assert f"Fix: make dimension 0 a multiple of {N} (pad {bad} to {5 * N})" in flat
    assert "IndivisibleError" in flat          # JAX refuses it too


def test_a_missing_axis_name_and_a_mesh_too_large():
    text = " ".join(explorer.explore((8, 8), {"batch": N}, ("model",)).split())
    assert "the axis 'model', which is not in the mesh (its axes: batch)" in text
    assert "Fix: use one of those names, or add 'model' to the mesh" in text
    text = " ".join(explorer.explore((8, 8), {"batch": N + 1}, ("batch",)).split())
    assert f"needs {N + 1} devices, but this page has {N}" in text
    assert f"product is at most {N}" in text


def test_the_text_boxes_are_read_or_refused():
    assert explorer.parse_shape("16, 8") == (16, 8)
    assert explorer.parse_mesh("batch=2, neuron=4") == {"batch": 2, "neuron": 4}
    assert explorer.parse_spec("P('batch', None)") == ("batch", None)
    assert explorer.parse_spec("(batch, neuron), None") == (("batch", "neuron"), None)
    assert explorer.parse_spec("") == explorer.parse_spec("P()") == ()
    for parse, text in ((explorer.parse_shape, "16, -1"),
                        (explorer.parse_mesh, "batch 2"),
                        (explorer.parse_spec, "batch, 3")):
        with pytest.raises(explorer.ExplorerError):
            parse(text)


def replicating_explore(shape, mesh, spec):
    """A planted bug: the callback places every choice replicated, with no error."""
    jmesh = jax.sharding.Mesh(
        np.array(book.devices()[:int(np.prod(list(mesh.values())))]).reshape(
            tuple(mesh.values())), tuple(mesh))
    host = np.zeros(shape, np.float32)
    return shards.shard_table(jax.device_put(host, NamedSharding(jmesh, P())))


@pytest.mark.skipif(N < 2, reason="with one device a replicated array is a split one")
def test_planted_bug_a_replicating_callback_fails_the_table_check():
    choice = explorer.default_choice()
    rows, cols = book.mesh_shape_2d(N)
    buggy_text = replicating_explore(**choice)
    with pytest.raises(AssertionError):
        assert_table_matches(buggy_text, choice["shape"], rows, cols, choice["spec"])


@pytest.mark.skipif(N < 2, reason="with one device a replicated array is a split one")
def test_planted_bug_a_replicating_placement_is_refused(monkeypatch):
    def replicate(host, sharding):
        return jax.device_put(host, NamedSharding(sharding.mesh, P()))

    monkeypatch.setattr(explorer, "place", replicate)
    choice = explorer.default_choice()
    with pytest.raises(AssertionError, match="the spec .* gives it"):
        explorer.explore(**choice)


def test_the_widget_is_a_thin_wrapper_over_the_callback():
    import html

    choice = explorer.default_choice()
    w = explorer.widget(choice)
    shape_box, mesh_box, spec_box = w.children[0].children
    shown = w.children[1]
    assert html.unescape(shown.value) == f"<pre>{explorer.explore(**choice)}</pre>"
    spec_box.value = "P('batch', 'model')"           # as if the reader typed it
    assert "'model', which is not in the mesh" in html.unescape(shown.value)
    mesh_box.value = "batch 2"
    assert "cannot read the choice: a mesh is name=size pairs" in shown.value
