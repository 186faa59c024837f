//! The generated corpus holds the pinned number of cases per part (`conformance/corpus/counts.txt`),
//! and every engine's expectation list, the cuda list included (its engine does not run without a
//! GPU), names only cases of the corpus.
#![forbid(unsafe_code)]
use quorum_conformance::expect::{self, Expectations};
use quorum_conformance::{case, corpus, engine, integrity};

#[test]
fn the_corpus_holds_the_pinned_number_of_cases() {
    let dir = corpus::default_dir();
    corpus::ensure(&dir).expect("corpus");
    let cases = case::discover(&dir).expect("cases");
    if let Err(e) = integrity::check_pinned_counts(&cases) {
        panic!("{e:#}");
    }
    // One case fewer is caught.
    let mut shrunk = cases.clone();
    shrunk.pop();
    assert!(integrity::check_pinned_counts(&shrunk).is_err());
}

#[test]
fn every_expectation_list_names_only_cases_of_the_corpus() {
    let dir = corpus::default_dir();
    corpus::ensure(&dir).expect("corpus");
    let cases = case::discover(&dir).expect("cases");
    let mut stale = Vec::new();
    for e in engine::all() {
        let path = expect::path_for(e.name());
        let list = Expectations::load(&path).unwrap_or_else(|err| panic!("{err:#}"));
        stale.extend(integrity::stale_entries(&list, &path, &cases));
    }
    assert!(stale.is_empty(), "stale entries:\n{}", stale.join("\n"));
}
