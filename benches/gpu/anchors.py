"""PyTorch anchors for the device kernel benchmarks (`device-tests/tests/gpu/bench*.rs`), printed as
`ANCHOR name value unit` lines: SGEMM 1024^3 and 4096^3 (TF32 off), the same and 2048^3 and 8192^3
with TF32 on (beside Quorum's `--precision tf32` GEMM), f16 and bf16 GEMM (square and bert-base's
projections), the 64 MiB elementwise Add and
the batched MatMul [16,64,128] x [16,128,64], timed with CUDA events around batches after a warm-up
(medians of the batches), in the same device call as Quorum's figures. Run on the GPU machine:
`python3 benches/gpu/anchors.py`."""
import statistics

import torch


def per_call_ms(f, batch, reps, warm=3):
    for _ in range(warm):
        f()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(batch):
            f()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / batch)
    return statistics.median(times)


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    print(f"ANCHOR torch {torch.__version__} {torch.cuda.get_device_name(0)}")
    g = torch.Generator(device=dev).manual_seed(1)
    n = 16 << 20
    a = torch.rand(n, device=dev, generator=g)
    b = torch.rand(n, device=dev, generator=g)
    ms = per_call_ms(lambda: torch.add(a, b), 10, 20)
    print(f"ANCHOR torch_add_64mib {ms:.4f} ms {3 * n * 4 / (ms * 1e-3) / 1e12:.3f} TB/s")
    for size in (1024, 4096):
        x = torch.rand(size, size, device=dev, generator=g)
        y = torch.rand(size, size, device=dev, generator=g)
        reps, batch = (5, 4) if size >= 4096 else (20, 10)
        ms = per_call_ms(lambda: torch.mm(x, y), batch, reps)
        print(f"ANCHOR torch_sgemm_{size} {2 * size**3 / (ms * 1e-3) / 1e12:.2f} TFLOP/s ({ms:.3f} ms)")
    # TF32 on: what PyTorch users get with allow_tf32 (cuBLAS on the tensor cores).
    torch.backends.cuda.matmul.allow_tf32 = True
    for size in (1024, 2048, 4096, 8192):
        x = torch.rand(size, size, device=dev, generator=g)
        y = torch.rand(size, size, device=dev, generator=g)
        reps, batch = (5, 4) if size >= 4096 else (20, 10)
        ms = per_call_ms(lambda: torch.mm(x, y), batch, reps)
        print(f"ANCHOR torch_tf32_gemm_{size} {2 * size**3 / (ms * 1e-3) / 1e12:.2f} TFLOP/s ({ms:.3f} ms)")
    torch.backends.cuda.matmul.allow_tf32 = False
    # f16 operands and outputs, sums in f32 (reduced-precision reductions off: cuBLAS may otherwise
    # sum split-K partials in f16, which Quorum's promise does not allow).
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    for dtype, label in ((torch.float16, "f16"), (torch.bfloat16, "bf16")):
        for m, n, k in ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
                        (1024, 768, 768), (1024, 3072, 768), (1024, 768, 3072)):
            x = torch.rand(m, k, device=dev, generator=g).to(dtype)
            y = torch.rand(k, n, device=dev, generator=g).to(dtype)
            reps, batch = (5, 4) if m * n * k >= 1 << 36 else (20, 10)
            ms = per_call_ms(lambda: torch.mm(x, y), batch, reps)
            print(f"ANCHOR torch_{label}_gemm_{m}x{n}x{k} {2 * m * n * k / (ms * 1e-3) / 1e12:.2f} TFLOP/s ({ms:.3f} ms)")
    x = torch.rand(16, 64, 128, device=dev, generator=g)
    y = torch.rand(16, 128, 64, device=dev, generator=g)
    ms = per_call_ms(lambda: torch.bmm(x, y), 100, 20)
    print(f"ANCHOR torch_batched_matmul_16x64x128x64 {ms * 1e3:.1f} us (device time per call)")


if __name__ == "__main__":
    main()
