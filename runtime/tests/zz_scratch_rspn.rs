//! TEMPORARY scratch target of the reduce/softmax/norm/pool helper (removed before hand-off).
#![cfg(feature = "gpu-tests")]
#[path = "gpu/harness.rs"]
mod harness;
#[path = "gpu/reduce.rs"]
mod reduce;
#[path = "gpu/softmax.rs"]
mod softmax;
#[path = "gpu/norm.rs"]
mod norm;
#[path = "gpu/pool.rs"]
mod pool;

mod scratch_bench {
    use std::collections::HashMap;
    use std::sync::Arc;

    use quorum::cuda::driver::Event;
    use quorum::cuda::{Counters, DevTensor, Device, Inputs, KResult, Run};
    use quorum::error::OpResult;
    use quorum::ir::{Attr, Graph, Node};
    use quorum::ops::{OpCtx, SubgraphRunner};
    use quorum::{DType, Tensor, Value};

    use crate::harness::{i64s, rand_f32};

    struct NoSub;
    impl SubgraphRunner for NoSub {
        fn run_subgraph(&self, _: &Graph, _: Vec<Value>) -> OpResult<Vec<Value>> {
            Err(quorum::OpError::Invalid("no subgraphs".into()))
        }
    }

    struct DevIn {
        dev: Vec<Option<DevTensor>>,
        host: Vec<Option<Arc<Value>>>,
    }
    impl Inputs for DevIn {
        fn len(&self) -> usize {
            self.dev.len()
        }
        fn present(&self, i: usize) -> bool {
            self.dev.get(i).is_some_and(|d| d.is_some())
        }
        fn dtype(&self, i: usize) -> Option<DType> {
            self.dev.get(i)?.as_ref().map(|d| d.dtype)
        }
        fn shape(&self, i: usize) -> Option<Vec<usize>> {
            self.dev.get(i)?.as_ref().map(|d| d.shape.clone())
        }
        fn dev(&self, i: usize) -> KResult<Option<DevTensor>> {
            Ok(self.dev.get(i).cloned().flatten())
        }
        fn host(&self, i: usize) -> KResult<Option<Arc<Value>>> {
            Ok(self.host.get(i).cloned().flatten())
        }
    }

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    fn bench(run: &Run, name: &str, op: &str, opset: i64, attrs: &[(&str, Attr)], ins: Vec<Tensor>, outputs: usize, bytes: f64) {
        let node = Node {
            name: name.into(),
            op_type: op.into(),
            domain: String::new(),
            opset,
            inputs: (0..ins.len()).map(|i| format!("i{i}")).collect(),
            outputs: (0..outputs).map(|i| format!("o{i}")).collect(),
            attrs: attrs.iter().map(|(n, a)| (n.to_string(), a.clone())).collect::<HashMap<_, _>>(),
        };
        let kernel = quorum::cuda::claim(&node).expect("claimed");
        let dev: Vec<Option<DevTensor>> = ins.iter().map(|t| Some(run.upload(t).unwrap())).collect();
        let host: Vec<Option<Arc<Value>>> = ins.into_iter().map(|t| Some(Arc::new(Value::Tensor(t)))).collect();
        let inputs = DevIn { dev, host };
        let ctx = OpCtx { node: &node, runner: &NoSub, max_tensor_bytes: u64::MAX };
        for _ in 0..3 {
            for y in kernel(&ctx, run, &inputs).unwrap() {
                run.release(y);
            }
        }
        run.synchronize().unwrap();
        let mut times = Vec::new();
        for _ in 0..20 {
            let (a, b) = (Event::new(&run.device.ctx, true).unwrap(), Event::new(&run.device.ctx, true).unwrap());
            a.record(run.stream()).unwrap();
            for y in kernel(&ctx, run, &inputs).unwrap() {
                run.release(y);
            }
            b.record(run.stream()).unwrap();
            b.synchronize().unwrap();
            times.push(b.elapsed_since(&a).unwrap() as f64);
        }
        let ms = median(times);
        println!("BENCH {name:40} {ms:9.4} ms  {:7.3} TB/s", bytes / (ms * 1e-3) / 1e12);
    }

    #[test]
    #[ignore]
    fn scratch_bench_rspn() {
        let device = Device::get().expect("a CUDA device");
        let counters = Counters::default();
        let run = Run::new(&device, &counters, false).unwrap();
        let ints = |v: &[i64]| Attr::Ints(v.to_vec());
        let f = |n: usize| (n * 4) as f64;
        let big = rand_f32(1, &[8192, 8192]);
        let nb = 8192 * 8192;
        for (name, axes) in [("reduce_sum_8k2_axis1", 1i64), ("reduce_sum_8k2_axis0", 0)] {
            bench(&run, name, "ReduceSum", 13, &[], vec![big.clone(), i64s(&[1], vec![axes])], 1, f(nb));
        }
        bench(&run, "reduce_max_8k2_axis1", "ReduceMax", 13, &[("axes", ints(&[1]))], vec![big.clone()], 1, f(nb));
        bench(&run, "reduce_lse_8k2_axis1", "ReduceLogSumExp", 13, &[("axes", ints(&[1]))], vec![big.clone()], 1, f(nb));
        bench(&run, "argmax_8k2_axis1", "ArgMax", 13, &[("axis", Attr::Int(1))], vec![big.clone()], 1, f(nb));
        bench(&run, "argmax_8k2_axis0", "ArgMax", 13, &[("axis", Attr::Int(0))], vec![big.clone()], 1, f(nb));
        let long = rand_f32(2, &[64, 1 << 20]);
        bench(&run, "reduce_sum_64x1M_axis1", "ReduceSum", 13, &[], vec![long.clone(), i64s(&[1], vec![1])], 1, f(64 << 20));
        let tall = rand_f32(3, &[1 << 20, 64]);
        bench(&run, "reduce_sum_1Mx64_axis0", "ReduceSum", 13, &[], vec![tall.clone(), i64s(&[1], vec![0])], 1, f(64 << 20));
        bench(&run, "reduce_sum_1Mx64_axis1", "ReduceSum", 13, &[], vec![tall.clone(), i64s(&[1], vec![1])], 1, f(64 << 20));
        let act = rand_f32(4, &[32, 256, 56, 56]);
        let na = 32 * 256 * 56 * 56;
        bench(&run, "global_avg_32x256x56x56", "GlobalAveragePool", 1, &[], vec![act.clone()], 1, f(na));
        bench(&run, "softmax_8k2_last", "Softmax", 13, &[], vec![big.clone()], 1, f(2 * nb));
        bench(&run, "softmax_8k2_axis0", "Softmax", 13, &[("axis", Attr::Int(0))], vec![big.clone()], 1, f(2 * nb));
        let att = rand_f32(5, &[32, 12, 512, 512]);
        bench(&run, "softmax_attn_32x12x512x512", "Softmax", 13, &[], vec![att.clone()], 1, f(2 * 32 * 12 * 512 * 512));
        bench(&run, "logsoftmax_8k2_last", "LogSoftmax", 13, &[], vec![big.clone()], 1, f(2 * nb));
        let ln = rand_f32(6, &[8192, 1024]);
        bench(&run, "layernorm_8192x1024", "LayerNormalization", 17, &[], vec![ln.clone(), rand_f32(7, &[1024]), rand_f32(8, &[1024])], 1, f(2 * 8192 * 1024));
        bench(&run, "layernorm_1024x8192", "LayerNormalization", 17, &[], vec![rand_f32(6, &[1024, 8192]), rand_f32(7, &[8192]), rand_f32(8, &[8192])], 1, f(2 * 8192 * 1024));
        let c = 64;
        let x = rand_f32(9, &[32, c, 112, 112]);
        let nx = 32 * c * 112 * 112;
        let p = || rand_f32(10, &[c]);
        bench(&run, "batchnorm_32x64x112x112", "BatchNormalization", 15, &[], vec![x.clone(), p(), p(), p(), crate::harness::rand_range(11, &[c], 0.5, 1.5)], 1, f(2 * nx));
        bench(&run, "instnorm_32x64x112x112", "InstanceNormalization", 6, &[], vec![x.clone(), p(), p()], 1, f(2 * nx));
        bench(&run, "groupnorm_32x64x112x112_g8", "GroupNormalization", 21, &[("num_groups", Attr::Int(8))], vec![x.clone(), p(), p()], 1, f(2 * nx));
        let pool = [("kernel_shape", ints(&[3, 3])), ("strides", ints(&[2, 2])), ("pads", ints(&[1, 1, 1, 1]))];
        bench(&run, "maxpool_32x64x112x112_k3s2", "MaxPool", 12, &pool, vec![x.clone()], 1, f(nx + nx / 4));
        bench(&run, "maxpool_idx_32x64x112x112_k3s2", "MaxPool", 12, &pool, vec![x.clone()], 2, f(nx + 3 * nx / 4));
        bench(&run, "avgpool_32x64x112x112_k3s2", "AveragePool", 11, &pool, vec![x.clone()], 1, f(nx + nx / 4));
        bench(&run, "lrn_32x64x56x56", "LRN", 13, &[("size", Attr::Int(5))], vec![rand_f32(12, &[32, 64, 56, 56])], 1, f(2 * 32 * 64 * 56 * 56));
        bench(&run, "global_max_32x2048x7x7", "GlobalMaxPool", 1, &[], vec![rand_f32(13, &[32, 2048, 7, 7])], 1, f(32 * 2048 * 49));
    }
}
