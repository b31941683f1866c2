"""Torch-free tests of the per-step account (baselines/pytorch/common.py: kernel_class,
summary_account, account_from_chrome_trace) on kernel names seen in the records and on a synthetic
torch.profiler Chrome trace whose every number is known, and of the report's side of it
(report/analysis.py: time_account for a twin record and for one of ours)."""
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "baselines", "pytorch"))
sys.path.insert(0, os.path.join(ROOT, "report"))
import common as nbc  # noqa: E402

# kernel names from the committed records (twins' torch.profiler summaries, our CUPTI summaries) and
# the names torch / inductor / cuBLAS give the MLP's kernels
NAMES = {
    # PyTorch
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
    "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, ...)": "elementwise",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
    "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
    "unsigned int, float, 4, 4> >(...)": "reduction",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    "TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, "
    "std::vector<...> >(...)": "optimizer",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    "FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
    "(at::native::ADAM_MODE)0, false> >(...)": "optimizer",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
    "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)": "copy",
    "void at::native::index_elementwise_kernel<128, 4, at::native::index_copy_kernel_impl<at::native::"
    "OpaqueType<4> >(at::TensorIterator&, long, long, long)::{lambda(int)#1}>(long, ...)": "copy",
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
    "::{lambda()#3}::operator()() const::{lambda(c10::Half)#1}, ...>(...)": "copy",
    "triton_poi_fused_add_div_expand_mul_pow_sub_0": "elementwise",
    "triton_poi_fused_mean_mul_0": "elementwise",  # the Triton prefix wins over 'mean'
    "triton_red_fused_add_mean_mul_pow_sub_0": "reduction",
    "triton_per_fused_sum_2": "reduction",
    "triton_tem_fused_addmm_relu_0": "gemm",
    "sm90_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_"
    "kernel__5x_cublas": "gemm",
    "nvjet_sm90_hss_64x32_64x16_2x1_v_bz_NNT": "gemm",
    "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, false, true, "
    "false>(...)": "gemm",
    "cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, float, float, float, true, "
    "false, false, false>": "gemm",
    "void (anonymous namespace)::softmax_warp_forward<float, float, float, 4, true, false>(...)": "reduction",
    "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(...)":
        "reduction",
    "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, unsigned int, 1, 4, bool>"
    "(...)": "elementwise",
    # ours
    "forward_kernel": "elementwise", "loss_kernel": "reduction", "grad_kernel": "reduction",
    "update_kernel": "optimizer", "init_params_kernel": "other", "fused_epoch_kernel": "reduction",
    "test_eval_kernel": "reduction", "final_update_kernel": "optimizer", "reset_params_kernel": "other",
    "nb::mlp::gemm_kernel<nb::mlp::p5_fwd_softmax_ce, float, nb::mlp::GemmProblem<nb::mlp::GatherView<float>, "
    "nb::mlp::MatView<float, false>, nb::mlp::SoftmaxCEEpi<float> >, false, true>": "gemm",
    "nb::mlp::fused_update_bwd_kernel<nb::mlp::p5_fused_update_bwd>": "gemm",
    "nb::mlp::flat_update_kernel<void>": "optimizer", "nb::mlp::adam_kernel<void>": "optimizer",
    "nb::mlp::bias_grad_kernel<float>": "reduction", "nb::mlp::bias_act_kernel<float>": "elementwise",
    "nb::mlp::relu_dropout_bwd_kernel<__half>": "elementwise", "nb::mlp::softmax_ce_kernel<float>": "reduction",
    "nb::mlp::bytes_to_batch_kernel<float>": "copy", "nb::mlp::gather_kernel<__half>": "copy",
    "nb::mlp::epilogue_kernel<nb::mlp::p5_epi_softmax_ce, nb::mlp::SoftmaxCEEpi<float> >": "reduction",
    "nb::mlp::epilogue_kernel<nb::mlp::p5_epi_hidden, nb::mlp::FwdHiddenEpi<float> >": "elementwise",
    "nb::mlp::p5_persistent_epoch<1, true>": "other", "nb::mlp::p5_cluster_epoch": "other",
    "something_new_kernel": "other",
}


@pytest.mark.parametrize("name,cls", sorted(NAMES.items()))
def test_kernel_class(name, cls):
    assert nbc.kernel_class(name) == cls


def test_every_class_is_documented_and_reachable():
    assert set(NAMES.values()) == set(nbc.KERNEL_CLASSES)
    doc = " ".join(nbc.KERNEL_CLASS_DOC)
    for c in nbc.KERNEL_CLASSES:
        assert f"-> {c}" in doc


def test_union_length():
    assert nbc.union_length([]) == 0
    assert nbc.union_length([(0, 2), (1, 3), (5, 6)]) == 4
    assert nbc.union_length([(5, 6), (0, 10)]) == 10
    assert nbc.union_length([(0, 1), (1, 2)]) == 2


def synthetic_trace():
    """Two steps of a made-up eager run (times in µs, as torch.profiler writes them):
    per step a GEMM (10 µs), an elementwise kernel (4 µs), a fused Adam kernel (6 µs) on stream 7,
    and a 2 µs DtoH copy on stream 8 that overlaps the Adam kernel by 1 µs; 100 µs of host work per step
    (an aten op holding the three launch calls and a memcpy call); a final 30 µs cudaDeviceSynchronize
    that must not count as host work."""
    ev = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}]
    for s in range(2):
        h = 1000.0 + 100.0 * s
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": h, "dur": 100.0})
        for i, api in enumerate(("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernel", "cudaMemcpyAsync")):
            ev.append({"ph": "X", "cat": "cuda_runtime" if api.startswith("cuda") else "cuda_driver", "name": api,
                       "pid": 1, "tid": 1, "ts": h + 10 * i, "dur": 5.0, "args": {"correlation": 4 * s + i}})
        g = 5000.0 + 50.0 * s
        for name, t, d in (("nvjet_sm90_hss_64x32_64x16_2x1_v_bz_NNT", 0.0, 10.0),
                           ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >",
                            12.0, 4.0),
                           ("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor<float> >", 20.0, 6.0)):
            ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": g + t, "dur": d,
                       "args": {"grid": [1, 1, 1], "block": [128, 1, 1]}})
        ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 0, "tid": 8,
                   "ts": g + 25.0, "dur": 2.0, "args": {"bytes": 4}})
    ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1, "tid": 1,
               "ts": 1200.0, "dur": 30.0})
    ev.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 5000.0, "id": 1})
    return {"traceEvents": ev}


def test_account_from_synthetic_trace(tmp_path):
    trace = synthetic_trace()
    a = nbc.account_from_chrome_trace(trace, "step", 2, unit_ms=0.150, host_ms=0.210, profiled_ms=0.260)
    assert a["unit"] == "step" and a["steps"] == 2
    assert a["launches_per_unit"] == pytest.approx(3.0)
    assert a["copies_per_unit"] == pytest.approx(1.0)
    assert a["launch_calls_per_unit"] == pytest.approx(4.0)  # 3 kernel launches + 1 memcpy call; not the sync
    assert a["kernel_ms_per_unit"] == pytest.approx(0.020)
    assert a["device_ms_per_unit"] == pytest.approx(0.022)
    assert a["busy_ms_per_unit"] == pytest.approx(0.021)  # 10 + 4 + (6 + 2 - 1 overlap)
    assert a["idle_ms_per_unit"] == pytest.approx(0.150 - 0.021)
    assert a["host_ms_per_unit"] == pytest.approx(0.105)
    assert a["profiled_ms_per_unit"] == pytest.approx(0.130)
    assert a["host_ops_ms_per_unit"] == pytest.approx(0.100)  # the synchronize is waiting, not issuing
    cats = a["by_category_ms_per_unit"]
    assert set(cats) == set(nbc.KERNEL_CLASSES)
    assert cats["gemm"] == pytest.approx(0.010)
    assert cats["elementwise"] == pytest.approx(0.004)
    assert cats["optimizer"] == pytest.approx(0.006)
    assert cats["copy"] == pytest.approx(0.002)
    assert cats["reduction"] == 0 and cats["other"] == 0
    assert sum(cats.values()) == pytest.approx(a["device_ms_per_unit"])
    json.dumps(a, allow_nan=False)  # goes into a record as it is
    # a path and a bare event list give the same account
    p = tmp_path / "t.json"
    p.write_text(json.dumps(trace))
    assert nbc.account_from_chrome_trace(str(p), "step", 2, unit_ms=0.150) == \
        nbc.account_from_chrome_trace(trace["traceEvents"], "step", 2, unit_ms=0.150)
    # no timed median: no idle gap; no units: no account
    assert nbc.account_from_chrome_trace(trace, "epoch", 2)["idle_ms_per_unit"] is None
    assert nbc.account_from_chrome_trace(trace, "epoch", 0) is None


def test_summary_account_skips_and_ignores_junk():
    ks = [{"name": "nb::mlp::adam_kernel<void>", "calls": 10, "total_ns": 5000},
          {"name": "nb::mlp::gemm_kernel<nb::mlp::p5_eval, float>", "calls": 2, "total_ns": 800},
          {"name": "broken", "calls": 1, "total_ns": None}, "not a dict"]
    s = nbc.summary_account(ks, [{"kind": "memset", "calls": 5, "total_ns": 1000}], 5,
                            skip=lambda n: "eval" in n)
    assert s["launches_per_unit"] == 2 and s["copies_per_unit"] == 1
    assert s["kernel_ms_per_unit"] == pytest.approx(0.001)
    assert s["skipped_ms_per_unit"] == pytest.approx(0.00016)
    assert s["by_category_ms_per_unit"]["optimizer"] == pytest.approx(0.001)
    assert s["by_category_ms_per_unit"]["copy"] == pytest.approx(0.0002)
    assert nbc.summary_account(ks, [], 0) is None


class _Rec:
    """The few parts of records.Record that time_account reads."""

    def __init__(self, phase, workload, impl, data, tag="w1", path="/nonexistent/x.json"):
        self.phase, self.workload, self.impl, self.data, self.tag = phase, workload, impl, data, tag
        self.abspath = self.path = path
        self.config = data.get("config", {})

    def cfg_num(self, k):
        v = self.config.get(k)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def total_ms(self, stat="median"):
        return self.data["timing"]["total_ms"][stat]

    def metric(self, k):
        v = (self.data.get("metrics") or {}).get(k)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def test_report_account_of_a_twin_and_of_ours():
    import analysis as A  # noqa: PLC0415

    trace = synthetic_trace()
    acc = nbc.account_from_chrome_trace(trace, "step", 2, unit_ms=0.150, host_ms=0.210)
    twin = _Rec("pytorch_mlp", "mlp_w1", "pytorch-eager",
                {"config": {"epochs": 1, "steps": 0}, "metrics": {"steps": 1000},
                 "timing": {"total_ms": {"median": 150.0}, "per_step_ms": {"median": 0.150}},
                 "kernels": nbc.kernel_summary_from_chrome_trace(trace),
                 "memcpy": nbc.memcpy_summary_from_chrome_trace(trace), "account": acc})
    t = A.time_account(twin)
    assert t["unit"] == "step" and t["unit_ms"] == pytest.approx(0.150)
    assert t["busy_ms"] == pytest.approx(0.021) and t["idle_ms"] == pytest.approx(0.129)
    assert t["host_ms"] == pytest.approx(0.105) and t["launches"] == pytest.approx(3.0)
    assert t["cats"] == pytest.approx(acc["by_category_ms_per_unit"])
    # a record without `account` still gives its device time (busy taken as the summed device time)
    old = _Rec("pytorch_linreg", "linreg", "pytorch-eager",
               {"config": {"epochs": 2}, "timing": {"total_ms": {"median": 1.0}},
                "kernels": nbc.kernel_summary_from_chrome_trace(trace), "memcpy": []})
    t = A.time_account(old)
    assert t["unit"] == "epoch" and t["busy_ms"] == pytest.approx(0.020) and t["host_ms"] is None
    assert t["idle_ms"] == pytest.approx(0.5 - 0.020)
    # ours: CUPTI summary over trace_runs x steps; evaluation kernels left out
    ours = _Rec("phase5_batched", "mlp_w2", "cuda",
                {"config": {"steps": 100, "epochs": 1}, "metrics": {"steps": 100}, "trace_runs": 2,
                 "timing": {"total_ms": {"median": 10.0}},
                 "kernels": [{"name": "nb::mlp::gemm_kernel<nb::mlp::p5_fwd_hidden>", "calls": 200, "total_ns": 8.0e6},
                             {"name": "nb::mlp::flat_update_kernel<void>", "calls": 200, "total_ns": 2.0e6},
                             {"name": "nb::mlp::gemm_kernel<nb::mlp::p5_eval>", "calls": 4, "total_ns": 1.0e6}],
                 "memcpy": [{"kind": "DtoH", "calls": 2, "bytes": 8, "total_ns": 4000}]})
    t = A.time_account(ours)
    assert t["steps"] == 200 and t["unit_ms"] == pytest.approx(0.1)
    assert t["kernel_ms"] == pytest.approx(0.05) and t["launches"] == pytest.approx(2.0)
    assert t["skipped_ms"] == pytest.approx(0.005)
    assert t["cats"]["gemm"] == pytest.approx(0.04) and t["cats"]["optimizer"] == pytest.approx(0.01)
    assert t["busy_ms"] == pytest.approx(0.05002) and t["idle_ms"] == pytest.approx(0.1 - 0.05002)
    assert A.time_account(_Rec("phase4_mlp", "mlp_w1", "cuda-fp32", {"config": {}, "kernels": [],
                                                                      "timing": {"total_ms": {"median": 1.0}}})) is None
