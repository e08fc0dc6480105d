"""The prepared per-signature GPU call (``HostPlan.runner`` through ``ts.jit``), driven on
CPU with the stand-ins of ``bench/host_path.py``: launches get the right pointers, grid
and stream, and every argument it does not accept goes to the checked path."""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import host_path  # noqa: E402
from tessera.frontend import jit as jit_mod  # noqa: E402
from tessera.runtime import cuda  # noqa: E402


@pytest.fixture
def gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    with host_path.stand_ins() as fake:
        fake.read = 4  # the where kernel's parameters: out, c, a, b
        yield fake


@pytest.fixture
def checked(monkeypatch):
    """Counts calls of the checked path, ``HostPlan.run``."""
    calls = []
    real = cuda.HostPlan.run

    def run(self, args, poison=False):
        calls.append(args)
        return real(self, args, poison)

    monkeypatch.setattr(cuda.HostPlan, "run", run)
    return calls


def test_cached_call_launches_through_the_prepared_call(gpu, checked, monkeypatch):
    pick = host_path.where_function()
    c, a, b = host_path.where_args()
    first = pick(c, a, b)
    assert len(checked) == 1 and gpu.launches == 1
    monkeypatch.setattr(
        jit_mod.CompiledFunction, "_specialize", lambda *x: pytest.fail("specialized again")
    )
    outs = [pick(c, a, b) for _ in range(3)]
    assert len(checked) == 1, "repeated calls must not take the checked path"
    assert gpu.launches == 4
    fn, grid, block, stream, values = gpu.last
    # 1024 elements, 4 per lane (the f32 operands' vector width), 256 lanes: one tile
    assert fn == "function pick_select_0" and grid == (1, 1, 1) and block[1:] == (1, 1)
    assert stream == 0
    out = outs[-1]
    assert values == [out.data_ptr(), c.data_ptr(), a.data_ptr(), b.data_ptr()]
    assert out.shape == first.shape and out.dtype == torch.float32
    assert len({id(o) for o in (first, *outs)}) == 4, "each call gets a fresh output"


def test_static_arguments_are_part_of_the_prepared_call(gpu, checked):
    import tessera as ts

    @ts.jit
    def scaled(a, s, b):
        return a * s + b

    gpu.read = 0  # another kernel: its parameters are not read back
    a, b = torch.randn(64), torch.randn(64)
    scaled(a, 2.0, b)
    scaled(a, 2.0, b)
    assert len(checked) == 1
    scaled(a, 3.0, b)  # another static value: another specialization, checked once
    scaled(a, 3.0, b)
    scaled(a, 2.0, b)
    assert len(checked) == 2
    assert len(scaled._hot) == 2


@pytest.mark.parametrize("bad", ["float64", "shape", "numpy"])
def test_runner_declines_what_needs_checks(gpu, bad):
    pick = host_path.where_function()
    c, a, b = host_path.where_args()
    pick(c, a, b)
    spec = pick.specialize(c, a, b)
    run = cuda.host_plan(spec.launch_module(), spec.name, spec.ir("ptx")).runner()
    assert run is not None and run([c, a, b]) is not None
    other = {
        "float64": a.double(),
        "shape": torch.randn(1023),
        "numpy": a.numpy(),
    }[bad]
    before = gpu.launches
    assert run([c, other, b]) is None
    assert gpu.launches == before, "a declined call launches nothing"


def test_requires_grad_takes_the_prepared_call_only_without_grad_mode(gpu, checked):
    """A tensor that requires grad leaves the prepared call to jit's autograd path while
    grad mode is on (its result must carry a ``grad_fn``); under ``torch.no_grad`` (how
    AOTAutograd runs a compiled forward or backward) the prepared call takes it."""
    pick = host_path.where_function()
    c, a, b = host_path.where_args()
    pick(c, a, b)
    assert len(checked) == 1
    w = a.clone().requires_grad_()
    with torch.no_grad():
        out = pick(c, w, b)
    assert len(checked) == 1, "no checked path under no_grad"
    assert gpu.last[4][2] == w.data_ptr() and not out.requires_grad
    before = gpu.launches
    out = pick(c, w, b)
    assert out.requires_grad and out.grad_fn is not None
    assert gpu.launches == before + 1


def test_runner_declines_another_device_and_the_profiler(gpu, monkeypatch):
    pick = host_path.where_function()
    args = host_path.where_args()
    pick(*args)
    spec = pick.specialize(*args)
    run = cuda.host_plan(spec.launch_module(), spec.name, spec.ir("ptx")).runner()
    monkeypatch.setattr(cuda, "LAUNCH_HOOK", object())
    assert run(args) is None
    monkeypatch.setattr(cuda, "LAUNCH_HOOK", None)
    assert run(args) is not None
    plan = cuda.HostPlan(spec.launch_module(), spec.name, 0, spec.ir("ptx"))
    monkeypatch.setattr(cuda, "device_getter", lambda: (lambda: 1))
    assert plan.runner()(args) is None


def test_runner_copies_non_contiguous_and_misaligned_arguments(gpu, checked):
    """As the checked path does, the prepared call gives the kernel a contiguous,
    16-byte aligned copy of such an argument instead of declining the call."""
    pick = host_path.where_function()
    c, a, b = host_path.where_args()
    pick(c, a, b)
    for other in (torch.randn(2048)[::2], torch.randn(1025)[1:]):
        out = pick(c, other, b)
        assert len(checked) == 1, "no checked path"
        ptr = gpu.last[4][2]
        assert ptr != other.data_ptr() and ptr % cuda.ALIGNMENT == 0
        assert out.shape == a.shape


def test_checks_still_raise(gpu):
    pick = host_path.where_function()
    c, a, b = host_path.where_args()
    pick(c, a, b)
    spec = pick.specialize(c, a, b)
    plan = cuda.host_plan(spec.launch_module(), spec.name, spec.ir("ptx"))
    with pytest.raises(cuda.LaunchError, match="argument 1: tensor is on cpu, expected a CUDA"):
        plan.run([c, torch.randn(2048)[::2], b])  # checked: only CPU tensors under the stand-ins


def test_kernel_launch_refills_its_buffer():
    from tessera.ir import target as tt
    from tests.runtime.test_cuda_launch_host import FakeDriver, _target_module

    module = _target_module()
    kernel = next(op for op in module.body.block.ops if isinstance(op, tt.FuncOp))
    n = len(kernel.block.args)
    fake = FakeDriver(n)
    real = cuda._driver
    cuda._driver = lambda: fake
    try:
        run = cuda.KernelLaunch("fn", kernel, [5], tensors=[True] * n)
        xs, ys = [torch.empty(3) for _ in range(n)], [torch.empty(3) for _ in range(n)]
        run.launch(xs, 9)
        run.launch(ys, 9)
        with pytest.raises(cuda.LaunchError, match="takes"):
            run.launch(xs[:-1], 9)
        with pytest.raises(cuda.LaunchError, match="argument kinds"):
            cuda.KernelLaunch("fn", kernel, [5], tensors=[True])
    finally:
        cuda._driver = real
    assert [v for *_, v in fake.launches] == [
        [t.data_ptr() for t in xs], [t.data_ptr() for t in ys]
    ]


def test_annotation_errors_still_raise_after_a_cached_call(gpu):
    import tessera as ts
    from tessera.frontend.errors import TesseraTypeError

    @ts.jit
    def add(a: ts.Tensor["N", ts.f32], b: ts.Tensor["N", ts.f32]):  # noqa: F821
        return a + b

    gpu.read = 0
    a, b = torch.randn(64), torch.randn(64)
    add(a, b)
    add(a, b)
    assert len(add._hot) == 1
    with pytest.raises(TesseraTypeError, match="argument 'a' has dtype"):
        add(a.double(), b)


def test_reshape_views_share_the_buffer(gpu, checked):
    """A reshape is a torch view on both paths: the kernel after it reads, and the
    caller gets, the buffer the kernel before it wrote; no kernel copies it."""
    import tessera as ts

    @ts.jit
    def f(x):
        y = ts.exp(x)
        z = ts.reshape(y, (32, 32))
        return ts.reshape(ts.tanh(z), (1024,)), z

    launches = gpu.params  # each launch's first parameters
    gpu.read = 2  # out, x
    x = torch.randn(1024)
    spec = f.specialize(x)
    plan = cuda.host_plan(spec.launch_module(), spec.name, spec.ir("ptx"))
    for call in (plan.run, plan.runner()):  # the checked path, the prepared one
        results = call([x])
        (exp_out, exp_in), (tanh_out, tanh_in) = launches[-2:]
        assert exp_in == x.data_ptr() and tanh_in == exp_out
        w, z = results
        assert z.shape == (32, 32) and z.data_ptr() == exp_out
        assert w.shape == (1024,) and w.data_ptr() == tanh_out
    assert len(launches) == 4


def test_star_args_function_takes_the_prepared_call(gpu, checked):
    """A function of ``*args`` alone (a torch.compile partition) is remembered for the
    prepared call like one with named parameters: repeated calls skip the checked path."""
    import tessera as ts

    @ts.jit
    def pick(*xs):
        return ts.where(xs[0], xs[1], xs[2])

    c, a, b = host_path.where_args()
    first = pick(c, a, b)
    outs = [pick(c, a, b) for _ in range(3)]
    assert len(checked) == 1, "repeated calls must not take the checked path"
    assert gpu.launches == 4
    assert all(o.shape == first.shape for o in outs)
