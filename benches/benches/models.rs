//! Criterion benches of whole models: every light model of the generated corpus
//! (`target/corpus/onnx-1.23.2/light`, or `QUORUM_BENCH_CORPUS`) on every provider present and
//! under `auto`, named `{provider}_{model}`. Skipped, with a line saying so, without a corpus.
#![forbid(unsafe_code)]
use std::path::PathBuf;

use criterion::{Criterion, criterion_group, criterion_main};
use quorum::{Provider, Session, SessionOptions};
use quorum_benches::{providers, timed_runs};
use quorum_matrix::light;

fn models(c: &mut Criterion) {
    let corpus = std::env::var_os("QUORUM_BENCH_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/corpus/onnx-1.23.2")
        });
    let paths = light::models(&corpus);
    if paths.is_empty() {
        eprintln!(
            "no light models under {}: model benches skipped",
            corpus.display()
        );
        return;
    }
    let mut g = c.benchmark_group("models");
    for path in &paths {
        let name = light::model_name(path);
        let mut configs: Vec<(String, SessionOptions)> = providers()
            .into_iter()
            .map(|p| {
                (
                    p.name().to_string(),
                    SessionOptions {
                        providers: vec![p, Provider::Cpu],
                        ..Default::default()
                    },
                )
            })
            .collect();
        if configs.len() > 1 {
            let (providers, floor) = quorum::parse_providers("auto").expect("auto parses");
            configs.push((
                "auto".into(),
                SessionOptions {
                    providers,
                    min_device_elements: floor,
                    ..Default::default()
                },
            ));
        }
        for (provider, options) in configs {
            let Ok(s) = Session::from_file(path, options) else {
                continue;
            };
            let Ok(feeds) = quorum::inputs::generate(&s.model().graph, &[], &Default::default(), 0)
            else {
                continue;
            };
            if s.run(feeds.clone()).is_err() {
                continue;
            }
            g.bench_function(format!("{provider}_{name}"), |b| {
                b.iter_custom(|iters| timed_runs(&s, &feeds, iters))
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = models
}
criterion_main!(benches);
