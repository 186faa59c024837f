//! Criterion benches per op family: the quick sweep of `quorum-matrix` (a few sizes per family) on
//! every provider present, one group per family, named `{provider}_{op}_{dtype}` with the input
//! shapes as the parameter. Device benches time whole runs in `iter_custom` (inputs uploaded,
//! outputs back on the host: synchronised).
#![forbid(unsafe_code)]
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use quorum_benches::{label, name, providers, session, timed_runs};
use quorum_matrix::cases::{Size, sweep};

fn ops(c: &mut Criterion) {
    let cases = sweep(Size::Quick, &[]);
    let mut families: Vec<&'static str> = cases
        .iter()
        .map(|c| quorum::session::dispatch::family(&c.op))
        .collect();
    families.dedup();
    for fam in families {
        let mut g = c.benchmark_group(fam);
        for case in cases
            .iter()
            .filter(|c| quorum::session::dispatch::family(&c.op) == fam)
        {
            for p in providers() {
                let Some((s, feeds)) = session(case, p) else {
                    continue;
                };
                g.bench_with_input(BenchmarkId::new(name(p, case), label(case)), &(), |b, _| {
                    b.iter_custom(|iters| timed_runs(&s, &feeds, iters))
                });
            }
        }
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(std::time::Duration::from_millis(300)).measurement_time(std::time::Duration::from_secs(1));
    targets = ops
}
criterion_main!(benches);
