"""The attention and softmax PTX that Triton 3.9 and FlashAttention-4 (CuTe DSL) emit today, on the
emulator (issue 39). Fixtures: ``tests/sim/triton_ptx/triton_{softmax,attn_fwd}*``,
``triton_mm_ws_sm100`` (``generate_attention_fixtures.py``) and ``tests/sim/fa4_ptx/`` (its
``generate_fixtures.py``); launchers and float64 references: ``attnkit.py``; where each stops and
why: ``docs/attention-ptx-survey.md`` (from ``attn_survey.py``).

Every fixture runs against numpy float64 (since issue #39's emulator work no fixture stops at a
missing form). ``test_launch_recipe_with_forms_lowered`` runs FA4's sm_100a forward with a
``tcgen05.wait::ld`` inserted after each ``tcgen05.ld`` (the survey's rewrites), which checks its
JSON launch recipe and reference apart from the tensor-memory rule it breaks.
"""
import re

import numpy as np
import pytest

from attn_survey import REWRITES, rewrite_all, wait_after_tmem_loads
from attnkit import (fast_divmod, fast_divmod_quotient, fixture, run_fa4_forward, run_triton_attention,
                     run_triton_mm_ws, run_triton_softmax)
from cutedsl.sim import Emulator, RaceError

TRITON = ["triton_softmax_sm90", "triton_softmax_sm100", "triton_attn_fwd_sm90", "triton_attn_fwd_sm90_causal",
          "triton_attn_fwd_sm100", "triton_attn_fwd_sm100_causal", "triton_attn_fwd_ws_sm100", "triton_mm_ws_sm100"]
FA4 = ["fa4_fwd_sm90_hdim128", "fa4_fwd_sm100_hdim128"]
ATOL_F16_P = 4e-3       # P rounded to f16 before P V (unit-normal inputs, 64-wide head)
ATOL_BF16_P = 2e-2      # P and O in bf16


def check_attention(got, ref, atol, seed):
    (o, lse), (o_ref, lse_ref) = got, ref
    assert np.abs(o - o_ref).max() < atol, f"O off by {np.abs(o - o_ref).max()}, seed {seed}"
    assert np.abs(lse - lse_ref).max() < 1e-4, f"LSE off by {np.abs(lse - lse_ref).max()}, seed {seed}"


def run(name, rng, ptx=None, **opts):
    """The fixture's run on fresh inputs (``opts``: Emulator options): ``(results, references)``."""
    if "softmax" in name:
        return run_triton_softmax(Emulator(**opts), name, rng, ptx=ptx)
    if "mm_ws" in name:
        return run_triton_mm_ws(Emulator(**opts), name, rng, ptx=ptx)
    if name.startswith("fa4"):
        return run_fa4_forward(Emulator(**opts), name, rng, ptx=ptx)
    return run_triton_attention(Emulator(**opts), name, rng, ptx=ptx)


def check(name, got, ref, seed):
    if "softmax" in name:
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-7, err_msg=f"seed {seed}")
    elif "mm_ws" in name:
        assert np.array_equal(got, ref), f"seed {seed}"
    else:
        check_attention(got, ref, ATOL_BF16_P if name.startswith("fa4") else ATOL_F16_P, seed)


@pytest.mark.parametrize("name", TRITON + FA4)
def test_fixture_metadata_matches_ptx(name):
    ptx, meta = fixture(name)
    assert f".visible .entry {meta['entry']}(" in ptx
    decls = re.findall(rf"^\s*\.param (.*) {meta['entry']}_param_\d+(\[\d+\])?,?$", ptx, re.M)
    assert len(decls) == len(meta["params"])
    for (ptype, size), (_, kind, _) in zip(decls, meta["params"]):
        # tensor maps are 128-byte byval params, 64-byte aligned (CUtensorMap)
        assert (kind == "tensormap") == (size == "[128]" and ".align 64" in ptype), (name, ptype, kind)
    assert f".reqntid {meta['block'][0]}" in ptx
    target = meta["target"]
    assert f".target {target}" in ptx or f".target {target}a" in ptx
    if name.startswith("fa4"):
        assert meta["flash_attn_version"] == "4.0.0b36" and meta["cute_dsl_version"] == "4.8.1"
    else:
        assert meta["triton_version"].startswith("3.9")


@pytest.mark.parametrize("d", [1, 2, 3, 7, 128, 148, 1000003])
def test_fast_divmod_encoding_divides(d):
    # the FastDivmod triple the FA4 launcher passes, as its kernels decode it
    packed = fast_divmod(d)
    assert len(packed) == 12
    for x in (0, 1, d - 1, d, d + 1, 65535, 2**31 - 1, 2**32 - 1):
        assert fast_divmod_quotient(x, packed) == x // d, (d, x)


@pytest.mark.sim_kernel
@pytest.mark.parametrize("name", ["triton_softmax_sm90", "triton_softmax_sm100", "triton_attn_fwd_sm90",
                                  "triton_attn_fwd_sm90_causal",
                                  "triton_attn_fwd_sm100", "triton_attn_fwd_sm100_causal", "triton_attn_fwd_ws_sm100",
                                  "triton_mm_ws_sm100", "fa4_fwd_sm90_hdim128"])
def test_runs_today(name, rng):
    """Triton's Hopper softmax (37 rows of 200 columns: masked tail) and attention forward
    (2 heads of 128 rows, wgmma, TMA, causal and not) against float64; since issue #39's emulator
    work (three-input max.f32, brx.idx + .branchtargets, a warp's bar.arrive then bar.sync in one
    generation), Triton's sm_100a attention (plain, causal, warp-specialized), its warp-specialized
    sm_100a matmul and FA4's sm_90a forward too; since redux.sync.{min,max}.f32 (PTX ISA 9.7.13.12),
    Triton's sm_100a softmax, whose cross-warp row max is a redux.sync.max.f32."""
    got, ref = run(name, rng)
    check(name, got, ref, rng.seed_value)


#: the fixtures that do not run as compiled (test_launch_recipe_with_forms_lowered): FA4's TMEM loads
#: without tcgen05.wait::ld (inserted). No fixture stops at a missing form any more (issue #39).
REWRITTEN = ["fa4_fwd_sm100_hdim128"]


@pytest.mark.sim_kernel
def test_sm100_softmax_redux_f32_equals_its_shuffle_butterfly(rng):
    """The sm_100a softmax's two ``redux.sync.max.f32`` (its cross-warp row max, PTX ISA 9.7.13.12),
    emulated as compiled, give bit for bit what the survey's lowering into five ``shfl.sync.bfly`` +
    ``max.f32`` steps gives (no NaN in the inputs, where the two differ only in NaN payloads)."""
    ptx = fixture("triton_softmax_sm100")[0]
    _, _, pat, fn = next(r for r in REWRITES if r[0].startswith("redux"))
    assert len(re.findall(pat, ptx)) == 2
    lowered = re.sub(pat, fn, ptx)
    assert "redux" not in lowered
    got, ref = run("triton_softmax_sm100", np.random.default_rng(rng.seed_value))
    via_shfl, _ = run("triton_softmax_sm100", np.random.default_rng(rng.seed_value), ptx=lowered)
    assert np.array_equal(got, via_shfl), f"seed {rng.seed_value}"
    check("triton_softmax_sm100", got, ref, rng.seed_value)


@pytest.mark.sim_kernel
def test_fa4_sm100_tmem_load_then_store_is_the_isa_rule_with_its_opt_out(rng):
    """FA4's softmax warps load S with tcgen05.ld and store P over the same columns with tcgen05.st,
    with no tcgen05.wait::ld between them: reported under the ISA rule (PTX ISA 9.7.16.6.4.2,
    9.7.16.8.5); with that rule's opt-out alone the kernel matches float64."""
    with pytest.raises(RaceError, match=r"(?s)read by .*tcgen05\.ld unit of warp \d.*write by .*tcgen05\.st unit "
                                        r"of warp \d.*rule tcgen05-ld-without-wait"):
        run("fa4_fwd_sm100_hdim128", rng)
    got, ref = run("fa4_fwd_sm100_hdim128", rng, allow=("tcgen05-ld-without-wait",))
    check("fa4_fwd_sm100_hdim128", got, ref, rng.seed_value)


@pytest.mark.sim_kernel
@pytest.mark.parametrize("name", REWRITTEN)
def test_launch_recipe_with_forms_lowered(name, rng):
    """With the missing forms rewritten into equivalent PTX (and, for FA4 sm_100a, a
    tcgen05.wait::ld after each tcgen05.ld), each kernel matches float64: its JSON's launch
    recipe (parameters, tensor maps, grid) and the reference are right."""
    ptx, found = rewrite_all(fixture(name)[0])
    assert all(f[0] != "unhandled" for f in found), found
    if name.startswith("fa4"):
        ptx = wait_after_tmem_loads(ptx)
    got, ref = run(name, rng, ptx=ptx)
    check(name, got, ref, rng.seed_value)
