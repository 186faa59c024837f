//! The nightly page as a person sees it: rendered from a fixture (a CPU and a fake accelerator
//! with a crossover, three nights of history, graph wins and losses), opened in headless
//! Chromium, screenshotted, and checked that every plot shows data: each plot's SVG holds lines
//! with points (the DOM, measured in the browser) and, in the screenshot, coloured pixels inside
//! its box (axes and text are black or grey; data lines are coloured). The same check on the page
//! with its data lines stripped must fail.
//!
//! Part of `cargo test --workspace` (`.ci/run` installs Debian's `chromium`): the report is what
//! people read, and a page that renders empty plots must not land. Without Chromium the test
//! fails and says how to install it; `QUORUM_SKIP_BROWSER_TESTS=1` skips it on purpose.
use std::path::{Path, PathBuf};
use std::process::Command;

use quorum_matrix::machine::Machine;
use quorum_matrix::matrix::{Matrix, Point, ProviderInfo};
use quorum_matrix::measure::{GraphMode, Residency, Stats};
use quorum_matrix::models::{GraphOutcome, Validation};
use quorum_matrix::outputs::Outputs;

use super::history::{EngineCounts, Rule};

fn stats(ms: f64) -> Stats {
    Stats::from_samples(vec![ms * 0.97, ms, ms * 1.02, ms * 0.99, ms * 1.01])
}

fn point(provider: &str, residency: Residency, work: u64, ms: f64) -> Point {
    Point {
        family: "elementwise".into(),
        class: "same".into(),
        op: "Add".into(),
        case: format!("Add [{work}] [{work}]"),
        dtype: "float32".into(),
        source: "sweep".into(),
        work,
        unit: "elements".into(),
        provider: provider.into(),
        residency,
        graph: GraphMode::Eager,
        stats: Some(stats(ms)),
        note: None,
    }
}

/// Measurements with a crossover: the CPU grows linearly, the accelerator pays ~20 µs.
pub fn fixture(median_scale: f64) -> Outputs {
    let mut points = Vec::new();
    for k in 1..=8u32 {
        let work = 4u64.pow(k + 1);
        points.push(point("cpu", Residency::Host, work, work as f64 * 1e-5));
        points.push(point(
            "cuda",
            Residency::Host,
            work,
            0.02 + work as f64 * 1e-7,
        ));
        points.push(point(
            "cuda",
            Residency::Resident,
            work,
            0.01 + work as f64 * 1e-8,
        ));
    }
    let matrix = Matrix {
        schema: 1,
        adapter_id: "cuda-fixture-gpu".into(),
        quick: true,
        date: "2026-12-01".into(),
        commit: "fixture".into(),
        machine: Machine {
            cpu: "Fixture CPU".into(),
            cores: 2,
            threads: 2,
            memory_gib: 24.0,
            os: "fixture".into(),
        },
        providers: vec![
            ProviderInfo {
                provider: "cpu".into(),
                device: None,
                driver: None,
                adapter_id: None,
                unavailable: None,
            },
            ProviderInfo {
                provider: "cuda".into(),
                device: Some("Fixture GPU".into()),
                driver: Some("1.0".into()),
                adapter_id: Some("cuda-fixture-gpu".into()),
                unavailable: None,
            },
        ],
        points,
    };
    let tables = quorum_matrix::extract::tables(&matrix, "fixture");
    let graph = |model: &str, e: f64, r: f64| GraphOutcome {
        model: model.into(),
        provider: "cuda".into(),
        inputs: "x: float32[1, 3, 224, 224]".into(),
        eager: Some(stats(e)),
        replay: Some(stats(r)),
        verdict: quorum_matrix::models::graph_verdict(&stats(e), &stats(r)).into(),
        speedup: Some(e / r),
    };
    let validation = |case: &str, cpu: f64, gpu: f64| Validation {
        case: case.into(),
        timings: vec![
            ("cpu".into(), Ok(stats(cpu * median_scale))),
            ("cuda".into(), Ok(stats(gpu * median_scale))),
            ("auto".into(), Ok(stats(gpu * median_scale))),
        ],
        best: Some("cuda".into()),
        verdict: "ok".into(),
    };
    Outputs {
        matrix,
        tables,
        graphs: vec![graph("resnet50", 2.0, 1.2), graph("vgg19", 3.0, 3.3)],
        models: vec![
            validation("resnet50", 90.0, 2.0),
            validation("squeezenet", 15.0, 0.8),
        ],
    }
}

fn counts(pass: u64) -> Vec<EngineCounts> {
    vec![EngineCounts {
        engine: "cpu".into(),
        pass,
        fail: 0,
        unsupported: 10,
        nondeterministic: 2,
        total: pass + 12,
    }]
}

/// Renders three nights of the fixture into `reports` and returns tonight's page.
pub fn render_fixture(reports: &Path) -> PathBuf {
    let _ = std::fs::remove_dir_all(reports);
    let rule = Rule::default();
    for (day, pass) in [
        ("2026-11-29", 2000),
        ("2026-11-30", 2010),
        ("2026-12-01", 2018),
    ] {
        let o = fixture(1.0);
        super::render(reports, &o, counts(pass), "fixture", day, &rule, None).unwrap();
    }
    reports.join("nightly/2026-12-01/index.html")
}

fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("QUORUM_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join(name))
                    .find(|p| p.is_file())
            })
        })
}

/// Runs headless Chromium on `page` with `extra` arguments (a fresh profile each time).
fn browse(chrome: &Path, work: &Path, page: &Path, extra: &[String]) -> std::process::Output {
    let profile = work.join(format!("profile-{}", extra.len()));
    let _ = std::fs::remove_dir_all(&profile);
    Command::new("timeout")
        .arg("90")
        .arg(chrome)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1500,5200",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("running chromium")
}

/// What the browser measured of one plot.
#[derive(Debug, serde::Deserialize)]
struct Probe {
    section: String,
    x: f64,
    y: f64,
    w: f64,
    h: f64,
    /// Line elements with at least two points.
    lines: usize,
    /// Bars (rects other than the background).
    rects: usize,
}

/// The script that measures every plot's SVG once the page is laid out.
const PROBE: &str = r#"<script>
window.addEventListener('load', () => {
  const out = [];
  document.querySelectorAll('.plots').forEach(sec => sec.querySelectorAll('svg').forEach(svg => {
    const r = svg.getBoundingClientRect();
    const lines = [...svg.querySelectorAll('polyline')].filter(p => (p.getAttribute('points') || '').trim().split(/\s+/).length >= 2).length;
    const rects = Math.max(0, svg.querySelectorAll('rect').length - 1);
    out.push({section: sec.id, x: r.x + window.scrollX, y: r.y + window.scrollY, w: r.width, h: r.height, lines, rects});
  }));
  const pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"#;

/// Loads `html` in Chromium: the plots' boxes and element counts from the DOM, and for each the
/// number of coloured pixels inside its box in a screenshot. Returns (probe, coloured) pairs.
fn look(chrome: &Path, work: &Path, html: &str, name: &str) -> Vec<(Probe, usize)> {
    std::fs::create_dir_all(work).unwrap();
    let page = work.join(format!("{name}.html"));
    std::fs::write(&page, html.replace("</body>", &format!("{PROBE}</body>"))).unwrap();
    let dom = browse(
        chrome,
        work,
        &page,
        &["--virtual-time-budget=3000".into(), "--dump-dom".into()],
    );
    let text = String::from_utf8_lossy(&dom.stdout);
    let json = text
        .split("<pre id=\"probe\">")
        .nth(1)
        .and_then(|t| t.split("</pre>").next())
        .unwrap_or_else(|| {
            panic!(
                "no probe in the DOM; chromium said: {}",
                String::from_utf8_lossy(&dom.stderr)
            )
        });
    let probes: Vec<Probe> = serde_json::from_str(&json.replace("&quot;", "\"")).unwrap();
    let shot = work.join(format!("{name}.png"));
    let _ = std::fs::remove_file(&shot);
    let out = browse(
        chrome,
        work,
        &page,
        &[format!("--screenshot={}", shot.display())],
    );
    assert!(
        shot.is_file(),
        "no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    let coloured = |p: &Probe| {
        let mut n = 0;
        for y in (p.y as usize)..((p.y + p.h) as usize).min(info.height as usize) {
            for x in (p.x as usize)..((p.x + p.w) as usize).min(info.width as usize) {
                let i = (y * info.width as usize + x) * channels;
                let (r, g, b) = (buf[i] as i32, buf[i + 1] as i32, buf[i + 2] as i32);
                if r.max(g).max(b) - r.min(g).min(b) > 60 {
                    n += 1;
                }
            }
        }
        n
    };
    probes
        .into_iter()
        .map(|p| {
            let c = coloured(&p);
            (p, c)
        })
        .collect()
}

/// Every plot shows data: lines (or bars) in its SVG and coloured pixels on screen. Returns the
/// plots that do not.
fn blank_plots(seen: &[(Probe, usize)]) -> Vec<String> {
    seen.iter()
        .filter(|(p, coloured)| {
            let drawn = if p.section == "graph-plot" {
                p.rects > 0
            } else {
                p.lines > 0
            };
            !drawn || *coloured < 150 || p.w < 100.0 || p.h < 100.0
        })
        .map(|(p, c)| {
            format!(
                "{} at ({}, {}): {} lines, {} bars, {c} coloured pixels",
                p.section, p.x, p.y, p.lines, p.rects
            )
        })
        .collect()
}

#[test]
fn the_nightly_page_renders_its_plots_in_a_browser() {
    let Some(chrome) = chromium() else {
        if std::env::var_os("QUORUM_SKIP_BROWSER_TESTS").is_some() {
            eprintln!("skipped: QUORUM_SKIP_BROWSER_TESTS is set and no chromium is installed");
            return;
        }
        panic!(
            "headless Chromium is needed: apt-get install -y chromium (or set QUORUM_SKIP_BROWSER_TESTS=1)"
        );
    };
    let root = quorum_conformance::workspace_root();
    let work = root.join("target/nightly-browser-test");
    let page = render_fixture(&work.join("reports"));
    let html = std::fs::read_to_string(&page).unwrap();
    let seen = look(&chrome, &work, &html, "page");
    let sections: std::collections::BTreeSet<&str> =
        seen.iter().map(|(p, _)| p.section.as_str()).collect();
    for s in [
        "family-plots",
        "model-plots",
        "conformance-plot",
        "graph-plot",
    ] {
        assert!(sections.contains(s), "section {s} missing: {sections:?}");
    }
    assert_eq!(blank_plots(&seen), Vec::<String>::new(), "{seen:?}");
    // The broken variant: the same page with its data lines and points stripped (axes, text
    // and bars kept) must be caught.
    let re = regex::Regex::new(r"<polyline[^>]*/>|<circle[^>]*/>").unwrap();
    let stripped = re.replace_all(&html, "").into_owned();
    let broken = look(&chrome, &work, &stripped, "stripped");
    let blank = blank_plots(&broken);
    assert!(
        blank.iter().any(|b| b.starts_with("family-plots"))
            && blank.iter().any(|b| b.starts_with("model-plots")),
        "stripped plots passed: {broken:?}"
    );
}

#[test]
fn the_model_table_is_copied_beside_the_page_and_linked() {
    let work = std::env::temp_dir().join(format!("quorum-nightly-models-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let table = work.join("models-vs-pytorch.md");
    let text = "| model | Quorum graph / PyTorch graph |\n|---|---|\n| resnet18 b1 | 0.34 |\n";
    std::fs::write(&table, text).unwrap();
    let reports = work.join("reports");
    let rule = Rule::default();
    let o = fixture(1.0);
    super::render(
        &reports,
        &o,
        counts(2000),
        "fixture",
        "2026-12-02",
        &rule,
        Some(&table),
    )
    .unwrap();
    let night = reports.join("nightly/2026-12-02");
    let copied = std::fs::read_to_string(night.join(super::page::MODELS_TABLE)).unwrap();
    assert_eq!(copied, text);
    let link = format!("({})", super::page::MODELS_TABLE);
    let summary = std::fs::read_to_string(night.join("summary.md")).unwrap();
    assert!(summary.contains(&link), "{summary}");
    let html = std::fs::read_to_string(night.join("index.html")).unwrap();
    assert!(html.contains(&format!("href=\"{}\"", super::page::MODELS_TABLE)));
    // A night without the table links none.
    super::render(
        &reports,
        &o,
        counts(2000),
        "fixture",
        "2026-12-03",
        &rule,
        None,
    )
    .unwrap();
    let night = reports.join("nightly/2026-12-03");
    let summary = std::fs::read_to_string(night.join("summary.md")).unwrap();
    assert!(!summary.contains(super::page::MODELS_TABLE), "{summary}");
    assert!(!night.join(super::page::MODELS_TABLE).exists());
    let _ = std::fs::remove_dir_all(&work);
}
