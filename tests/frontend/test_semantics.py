"""Results equal to torch's for torch inputs and numpy's for numpy inputs: rank-0
results, transpose forms, true division, integer sums, signed zeros, jvp, float
literals that survive printing, and located errors for bad arguments and data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, TensorType, f16, f32, f64
from xdsl.parser import Parser

import tessera as ts
from tessera.frontend.errors import DataError, ShapeError, TesseraError, TesseraTypeError
from tessera.passes.pipelines import default_context
from tessera.runtime.tile_interpreter import run_host

torch = pytest.importorskip("torch")

HERE = "test_semantics.py:"


def jit(fn):
    return ts.jit(fn)


# --------------------------------------------------------------------------- rank-0 results


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: ts.sum(x),
        lambda x: ts.mean(x),
        lambda x: ts.max(x),
        lambda x: ts.mse(x, x * 0.5),
        lambda x: ts.sum(x) * 2.0,
    ],
    ids=["sum", "mean", "max", "mse", "scaled"],
)
def test_rank0_results_of_torch_inputs_are_rank0(fn):
    f = jit(fn)
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    r = f(x)
    assert isinstance(r, torch.Tensor) and r.shape == torch.Size([])
    assert f(x.numpy()).shape == ()
    assert float(r) == float(f(x.numpy()))


def test_rank0_input_and_value_and_grad():
    f = jit(lambda x: x * x)
    r = f(torch.tensor(3.0))
    assert r.shape == torch.Size([]) and float(r) == 9.0
    vg = ts.value_and_grad(jit(lambda x: ts.sum(x * x)))
    v, g = vg(torch.tensor([1.0, 2.0]))
    assert v.shape == torch.Size([]) and float(v) == 5.0
    torch.testing.assert_close(g, torch.tensor([2.0, 4.0]))


def test_bf16_rank0_result():
    r = jit(lambda x: ts.sum(x))(torch.ones(4, dtype=torch.bfloat16))
    assert r.dtype == torch.bfloat16 and r.shape == torch.Size([]) and float(r) == 4.0


def test_jvp_of_torch_inputs_returns_torch():
    f = jit(lambda x: ts.sum(x * x))
    x = torch.tensor([1.0, 2.0, 3.0])
    y, t = ts.jvp(f, (x,), (torch.ones(3),))
    assert isinstance(y, torch.Tensor) and isinstance(t, torch.Tensor)
    assert y.shape == torch.Size([]) and float(t) == 12.0
    y, t = ts.jvp(f, (x.numpy(),), (np.ones(3, np.float32),))
    assert isinstance(y, np.ndarray) and float(t) == 12.0


# --------------------------------------------------------------------------- transpose


def test_transpose_two_dims_swaps_at_every_rank():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = torch.from_numpy(x)
    for dims in [(0, 1), (1, 0), (-1, -2), (0, -1)]:
        got = jit(lambda x, d=dims: ts.transpose(x, *d))(x)  # noqa: B023
        np.testing.assert_array_equal(got, t.transpose(*dims).numpy())
    np.testing.assert_array_equal(jit(lambda x: x.transpose(0, 1))(x), x.T)
    np.testing.assert_array_equal(jit(lambda x: ts.transpose(x, (0, 1)))(x), x)  # numpy perm
    y = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(
        jit(lambda x: ts.transpose(x, 0, 2))(y), torch.from_numpy(y).transpose(0, 2).numpy()
    )
    np.testing.assert_array_equal(jit(lambda x: ts.transpose(x, 2, 0, 1))(y), y.transpose(2, 0, 1))


# --------------------------------------------------------------------------- promotion


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool])
def test_integer_division_is_true_division(dtype):
    a = torch.tensor([1, 2, 7, -7], dtype=dtype) if dtype != torch.bool else torch.tensor([True, False])
    b = torch.tensor([2, 2, 2, 2], dtype=dtype) if dtype != torch.bool else torch.tensor([True, True])
    r = jit(lambda x, y: x / y)(a, b)
    want = a / b
    assert r.dtype == want.dtype
    torch.testing.assert_close(r, want)
    if dtype != torch.bool:
        torch.testing.assert_close(jit(lambda x: x / 4)(a), a / 4)
        torch.testing.assert_close(jit(lambda x: 3 / x)(a), 3 / a)


def test_int_tensor_with_python_float_promotes_to_f32():
    a = torch.tensor([1, 2, 3], dtype=torch.int32)
    for fn in (lambda x: x * 1.5, lambda x: x + 0.25, lambda x: x ** 2.0, lambda x: x < 1.5):
        want = fn(a)
        got = jit(fn)(a)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)


def test_bool_tensor_with_python_int():
    a = torch.tensor([True, False, True])
    got = jit(lambda x: x + 1)(a)
    assert got.dtype == torch.int64
    torch.testing.assert_close(got, a + 1)


@pytest.mark.parametrize(
    "dtype", [torch.bool, torch.int8, torch.int32, torch.int64], ids=str
)
def test_sum_of_bool_and_ints_counts_in_int64(dtype):
    a = torch.tensor([[1, 0, 1], [1, 1, 0]], dtype=dtype)
    for axis in (None, 0, 1):
        f = jit(lambda x, ax=axis: ts.sum(x, axis=ax))  # noqa: B023
        got = f(a)
        want = a.sum() if axis is None else a.sum(dim=axis)
        assert got.dtype == torch.int64 and torch.equal(got, want)
        npgot = f(a.numpy())
        npwant = a.numpy().sum(axis=axis)
        assert npgot.dtype == npwant.dtype and np.array_equal(npgot, npwant)


def test_mean_of_integers_is_an_error():
    with pytest.raises(TesseraTypeError, match=rf"mean of a ts.int32 tensor.*\({HERE}"):
        jit(lambda x: ts.mean(x))(np.arange(3, dtype=np.int32))


# --------------------------------------------------------------------------- signed zeros

SPECIAL = np.array([-0.0, 0.0, -0.4, 0.4, -0.5, 0.5, -1.5, 2.5, -2.5, -1.0, 3.7, np.inf, -np.inf, np.nan],
                   dtype=np.float32)


def _same(a, b) -> None:
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)
    assert np.array_equal(np.signbit(a), np.signbit(b)), (a, b)


@pytest.mark.parametrize("name", ["relu", "round"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str)
def test_signed_zeros_like_torch(name, dtype):
    t = torch.from_numpy(SPECIAL).to(dtype)
    want = getattr(torch, name)(t)
    got = jit(getattr(ts, name))(t)
    _same(got.float().numpy(), want.float().numpy())


def _tile_run(fn, x):
    f = jit(fn)
    f(x)
    spec = f._last
    (r,) = run_host(spec.ir("tile"), spec.name, [x])
    return r, spec


@pytest.mark.parametrize("name", ["relu", "round"])
def test_signed_zeros_on_the_lowered_path(name):
    r, spec = _tile_run(getattr(ts, name), SPECIAL)
    _same(r, getattr(torch, name)(torch.from_numpy(SPECIAL)).numpy())
    ptx = str(spec.ir("ptx"))
    if name == "relu":
        assert "setp.lt.f32" in ptx and "selp.f32" in ptx and "max.NaN.f32" not in ptx
    from tessera.runtime import ptxas

    if ptxas.find_ptxas() is not None:
        ptxas.check(ptx)


# --------------------------------------------------------------------------- float literals


@pytest.mark.parametrize(
    "t, values",
    [
        (f32, [-math.inf]),
        (f32, [math.inf, math.nan, -0.0, 1.5]),
        (f64, [-math.inf, 0.1]),
        (f32, [123456792.0]),
        (f64, [2.0**60 + 2.0**8]),
        (f16, [-math.inf, 65504.0]),
        (f32, [1 / 3, 1e-38, 3.4028235e38]),
    ],
)
def test_dense_float_literals_reparse_bit_for_bit(t, values):
    a = DenseIntOrFPElementsAttr.from_list(TensorType(t, [len(values)]), values)
    b = Parser(default_context(), str(a)).parse_attribute()
    assert isinstance(b, DenseIntOrFPElementsAttr)
    assert b.data.data == a.data.data, str(a)


def test_constant_minus_inf_survives_a_print_parse_cycle():
    f = jit(lambda x: ts.maximum(x, -ts.inf) + ts.constant(np.array([np.nan, np.inf], np.float32)))
    x = np.array([1.0, -np.inf], np.float32)
    want = f(x)
    text = str(f._last.ir("graph"))
    again = Parser(default_context(), text).parse_module()
    from tessera.runtime.graph_interpreter import run_function

    (got,) = run_function(again, f._last.name, [x])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, np.array([np.nan, -np.inf], np.float32) + np.array([0, np.inf]))


# --------------------------------------------------------------------------- located errors


def _raises(cls, match, fn, *args):
    with pytest.raises(cls, match=match) as info:
        fn(*args)
    msg = str(info.value)
    assert HERE in msg and "\n" not in msg, msg
    return msg


def test_empty_inputs():
    e = np.zeros((0,), np.float32)
    _raises(ShapeError, "max of \\[0\\] over an empty axis", jit(lambda x: ts.max(x)), e)
    _raises(ShapeError, "min of \\[3, 0\\]", jit(lambda x: ts.min(x, axis=1)), np.zeros((3, 0), np.float32))
    _raises(ShapeError, "fft of \\[2, 0\\]", jit(lambda x: ts.fft(x)), np.zeros((2, 0), np.float32))
    assert jit(lambda x: ts.softmax(x, 0))(e).shape == (0,)
    assert float(jit(lambda x: ts.sum(x))(e)) == 0.0
    assert np.isnan(jit(lambda x: ts.mean(x))(e))
    assert jit(lambda x: ts.max(x, axis=1))(np.zeros((0, 3), np.float32)).shape == (0,)


def test_integer_pow_with_negative_exponent():
    a = np.array([2, 3], np.int32)
    _raises(TesseraTypeError, "negative power -1", jit(lambda x: x ** -1), a)
    _raises(DataError, "negative integer powers", jit(lambda x, y: x ** y), a, np.array([1, -2], np.int32))
    np.testing.assert_array_equal(jit(lambda x: x ** 2)(a), a ** 2)


def test_concat_of_rank0():
    s = np.array(1.0, np.float32)
    _raises(ShapeError, "rank-0 tensors cannot be concatenated", jit(lambda x, y: ts.concat([x, y])), s, s)


def test_index_arrays():
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    for ix in [np.array([3, 0, 0, 2]), [1, 2, 3], np.array([True, False, True, True]), (slice(1, None), np.array([4, -1, 0])), torch.tensor([2, 1])]:
        f = jit((lambda i: lambda x: x[i])(ix))
        want = x[ix.numpy() if isinstance(ix, torch.Tensor) else ix]
        np.testing.assert_array_equal(f(x), want)
        np.testing.assert_array_equal(f(torch.from_numpy(x)).numpy(), want)
    _raises(ShapeError, "index 9 out of range", jit(lambda x: x[np.array([0, 9])]), x)
    _raises(TesseraTypeError, "at most one index array", jit(lambda x: x[[0], [1]]), x)


def test_numpy_ufuncs_on_traced_tensors():
    x = np.linspace(0.5, 2.0, 6, dtype=np.float32)
    got = jit(lambda x: np.exp(x) * np.ones(6, np.float32) - np.sqrt(x) / np.float32(2))(x)
    np.testing.assert_allclose(got, np.exp(x) - np.sqrt(x) / 2, rtol=1e-6)
    _raises(TesseraTypeError, "np.arctan cannot run on a traced tensor", jit(lambda x: np.arctan(x)), x)
    _raises(TesseraTypeError, "np.add.reduce", jit(lambda x: np.add.reduce(x)), x)


def test_meta_tensor_is_refused():
    m = torch.ones(3, device="meta")
    _raises(TesseraTypeError, "device 'meta' has no data", jit(lambda x: x + 1), m)


def test_runtime_data_errors_name_the_call():
    # a matrix that is not positive definite is not an error: NaN from the failing
    # pivot's column on, as on the GPU (torch's ``info`` is the first NaN pivot)
    l_ = jit(lambda x: ts.cholesky(x))(np.diag([4.0, -1.0, 9.0]))
    assert l_[0, 0] == 2.0 and np.isnan(l_[1:, 1:][np.tril_indices(2)]).all()
    assert np.isfinite(l_[:, 0]).all() and (np.triu(l_, 1) == 0).all()
    spmm = jit(lambda a, b, c, d: ts.spmm(a, b, c, d, (2, 2)))
    bad = (np.array([0, 1, 5], np.int32), np.array([0, 7], np.int32),
           np.array([1.0, 2.0], np.float32), np.ones((2, 2), np.float32))
    _raises(DataError, "tgraph.spmm: malformed CSR operands", spmm, *bad)
    neg = (np.array([0, 1, 2], np.int32), np.array([0, -1], np.int32), bad[2], bad[3])
    _raises(DataError, "malformed CSR", spmm, *neg)
    assert issubclass(DataError, TesseraError) and issubclass(DataError, ValueError)


@ts.kernel
def _write_past_end(x: ts.mut[ts.f32[n]]):  # noqa: F821
    i = ts.tile.linear_id()
    x[i + 1] = 1.0


def test_kernel_index_out_of_range_is_located():
    _raises(DataError, "index 8 out of bounds for dimension 0 of size 8", _write_past_end,
            np.zeros(8, np.float32))


def test_infinite_constants_survive_the_program_cache_text():
    from xdsl.dialects import memref

    from tessera.runtime import program_cache

    vals = np.array([np.nan, np.inf, -np.inf, 2.0], np.float32)
    f = jit(lambda x: x + ts.constant(vals))
    f(np.ones(4, np.float32))
    target = f._last.ir("target")
    again = program_cache.parse_launch_module(program_cache.launch_module_text(target))

    def inits(m):
        return [op.initial_value.data.data for op in m.walk() if isinstance(op, memref.GlobalOp)]

    assert inits(target) and inits(again) == inits(target)


def test_binding_errors_name_the_call():
    f = jit(lambda x: x + 1)
    _raises(TesseraTypeError, "missing a required argument", f)
    _raises(TesseraTypeError, "too many positional arguments", f, np.ones(2), np.ones(2))
    _raises(TesseraTypeError, "unsupported dtype uint16", f, np.ones(2, np.uint16))
    _raises(TesseraTypeError, "unsupported type dict", f, {})


BAD_ARGUMENTS = {
    "cast to an unknown dtype": lambda x: ts.cast(x, "foo"),
    "cast to None": lambda x: ts.cast(x, None),
    "tile_shape of strings": lambda x: ts.matmul(x, x.T, tile_shape="ab"),
    "axis of a string": lambda x: ts.sum(x, axis="a"),
    "transpose dim of a string": lambda x: ts.transpose(x, "a", 1),
    "sparse_shape of one dim": lambda x: ts.spmm(x, x, x, x, (2,)),
    "eps of a string": lambda x: ts.layernorm(x, eps="a"),
    "negative randn shape": lambda x: x + ts.randn((-1, 4)),
    "int constant out of range": lambda x: ts.cast(x, ts.int32) + 2**40,
    "softmax axis out of range": lambda x: ts.softmax(x, 5),
    "index of None": lambda x: x[None],
}


@pytest.mark.parametrize("fn", BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS.keys())
def test_bad_arguments_are_located_errors(fn):
    # any message: what is checked is the class and that it names the line, on one line
    _raises(TesseraError, None, jit(fn), np.ones((3, 4), np.float32))


def test_numpy_functions_on_traced_tensors():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    cases = [
        (lambda x: np.sum(x, axis=1), lambda x: np.sum(x, axis=1)),
        (lambda x: np.max(x, axis=(0, 2), keepdims=True), lambda x: np.max(x, axis=(0, 2), keepdims=True)),
        (lambda x: np.transpose(x), np.transpose),
        (lambda x: np.transpose(x, (1, 0, 2)), lambda x: np.transpose(x, (1, 0, 2))),
        (lambda x: np.reshape(x, (4, -1)), lambda x: np.reshape(x, (4, -1))),
        (lambda x: np.concatenate([x, x], axis=2), lambda x: np.concatenate([x, x], axis=2)),
    ]
    for f, ref in cases:
        got, want = jit(f)(x), ref(x)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    _raises(TesseraTypeError, "np.sort cannot run on a traced tensor", jit(lambda x: np.sort(x)), x)
    _raises(TesseraTypeError, "take only axis and keepdims", jit(lambda x: np.sum(x, dtype=np.float64)), x)
    _raises(TesseraError, "no values while the function is traced", jit(lambda x: np.asarray(x)), x)


def test_a_non_tensor_result_names_the_call() -> None:
    """A traced function that returns a Python float is a located error."""
    fn = ts.jit(lambda x: 2.0)
    with pytest.raises(ts.TesseraTypeError, match=r"must return tensors \(test_semantics.py:\d+\)"):
        fn(np.ones(3, np.float32))
