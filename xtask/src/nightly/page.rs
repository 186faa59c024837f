//! The nightly page (`index.html`, every plot an inline SVG so that the page is one file) and its
//! short Markdown summary.
use std::collections::BTreeMap;
use std::fmt::Write;

use anyhow::Result;
use quorum_matrix::matrix::Point;
use quorum_matrix::measure::{GraphMode, Residency};
use quorum_matrix::outputs::Outputs;

use super::history::{Record, Rule};
use super::plots::{Bar, Lines, Series, bars, lines};

/// What the page is made from.
pub struct Context<'a> {
    pub outputs: &'a Outputs,
    pub now: &'a Record,
    /// This adapter's nights, oldest first, tonight last.
    pub nights: &'a [&'a Record],
    pub conformance_source: &'a str,
    pub rule: &'a Rule,
    /// Whether issue 16's model table ([`MODELS_TABLE`]) lies beside the page.
    pub models_table: bool,
}

/// The file name of the models-beside-PyTorch table in a nightly folder.
pub const MODELS_TABLE: &str = "models-vs-pytorch.md";

const MODELS_LINE: &str = "Models beside PyTorch (torchvision CNNs, ViT-S, BERT-base; eager, \
    graph replay, host to host; checked against onnxruntime), measured in the same call";

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The line name of a matrix point: provider, and for accelerators residency and graph mode.
fn series_name(p: &Point) -> String {
    if p.provider == "cpu" {
        return format!("cpu {}", p.dtype);
    }
    let r = match p.residency {
        Residency::Host => "host inputs",
        Residency::Resident => "resident",
    };
    let g = match p.graph {
        GraphMode::Eager => "",
        GraphMode::Replay => ", replay",
    };
    format!("{} {} ({r}{g})", p.provider, p.dtype)
}

/// Time against size for each family and class (the sweep's points), crossovers marked.
fn family_plots(o: &Outputs) -> Result<Vec<(String, String)>> {
    let mut groups: BTreeMap<(String, String), Vec<&Point>> = BTreeMap::new();
    for p in o
        .matrix
        .points
        .iter()
        .filter(|p| p.source == "sweep" && p.stats.is_some())
    {
        groups
            .entry((p.family.clone(), p.class.clone()))
            .or_default()
            .push(p);
    }
    let mut out = Vec::new();
    for ((family, class), points) in groups {
        let mut by_series: BTreeMap<String, Series> = BTreeMap::new();
        let unit = points[0].unit.clone();
        for p in &points {
            let s = p.stats.as_ref().expect("filtered");
            let e = by_series.entry(series_name(p)).or_insert_with(|| Series {
                name: series_name(p),
                points: Vec::new(),
                whiskers: Vec::new(),
            });
            e.points.push((p.work as f64, s.median_ms));
            e.whiskers.push((p.work as f64, s.p10_ms, s.p90_ms));
        }
        let mut series: Vec<Series> = by_series.into_values().collect();
        for s in &mut series {
            s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        let mut markers = Vec::new();
        for t in &o.tables {
            for e in t
                .entries
                .iter()
                .filter(|e| e.family == family && e.class == class)
            {
                if let Some(x) = e.host.threshold {
                    markers.push((
                        x as f64,
                        format!("{} {} host: {x}", t.adapter.provider, e.dtype),
                    ));
                }
                if let Some(x) = e.resident.threshold {
                    markers.push((
                        x as f64,
                        format!("{} {} resident: {x}", t.adapter.provider, e.dtype),
                    ));
                }
            }
        }
        let title = format!("{family} / {class}");
        let svg = lines(&Lines {
            title: title.clone(),
            x_desc: unit,
            y_desc: "median ms (p10-p90)".into(),
            log_x: true,
            log_y: true,
            series,
            markers,
            x_names: Vec::new(),
        })?;
        out.push((title, svg));
    }
    Ok(out)
}

/// Model latency per provider over the nights, one plot per model.
fn model_plots(ctx: &Context) -> Result<Vec<(String, String)>> {
    let dates: Vec<String> = ctx.nights.iter().map(|r| r.date.clone()).collect();
    let mut models: Vec<&str> = ctx.now.models.iter().map(|m| m.model.as_str()).collect();
    models.dedup();
    let mut out = Vec::new();
    for model in models {
        let mut by_provider: BTreeMap<String, Series> = BTreeMap::new();
        for (i, night) in ctx.nights.iter().enumerate() {
            for m in night.models.iter().filter(|m| m.model == model) {
                let s = by_provider
                    .entry(m.provider.clone())
                    .or_insert_with(|| Series {
                        name: m.provider.clone(),
                        points: Vec::new(),
                        whiskers: Vec::new(),
                    });
                s.points.push((i as f64, m.median_ms));
                s.whiskers.push((i as f64, m.p10_ms, m.p90_ms));
            }
        }
        let svg = lines(&Lines {
            title: model.to_string(),
            x_desc: "night".into(),
            y_desc: "median ms (p10-p90)".into(),
            log_x: false,
            log_y: true,
            series: by_provider.into_values().collect(),
            markers: Vec::new(),
            x_names: dates.clone(),
        })?;
        out.push((model.to_string(), svg));
    }
    Ok(out)
}

fn conformance_plot(ctx: &Context) -> Result<String> {
    let mut by_engine: BTreeMap<String, Series> = BTreeMap::new();
    for (i, night) in ctx.nights.iter().enumerate() {
        for c in &night.conformance {
            by_engine
                .entry(c.engine.clone())
                .or_insert_with(|| Series {
                    name: c.engine.clone(),
                    points: Vec::new(),
                    whiskers: Vec::new(),
                })
                .points
                .push((i as f64, c.pass as f64));
        }
    }
    lines(&Lines {
        title: "conformance: cases passing".into(),
        x_desc: "night".into(),
        y_desc: "cases".into(),
        log_x: false,
        log_y: false,
        series: by_engine.into_values().collect(),
        markers: Vec::new(),
        x_names: ctx.nights.iter().map(|r| r.date.clone()).collect(),
    })
}

fn graph_plot(o: &Outputs) -> Result<String> {
    let b: Vec<Bar> = o
        .graphs
        .iter()
        .filter_map(|g| {
            Some(Bar {
                name: g.model.clone(),
                value: g.speedup?,
                verdict: g.verdict.clone(),
            })
        })
        .collect();
    bars(
        "graph replay: eager median / replay median (above 1 wins)",
        "speed-up",
        &b,
    )
}

fn fmt_ms(s: &quorum_matrix::measure::Stats) -> String {
    format!("{:.3} [{:.3}, {:.3}]", s.median_ms, s.p10_ms, s.p90_ms)
}

/// The page.
pub fn html(ctx: &Context) -> Result<String> {
    let o = ctx.outputs;
    let m = &o.matrix;
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Quorum nightly {date}</title>\n<style>body{{font-family:sans-serif;margin:1.5em;max-width:1500px}}table{{border-collapse:collapse;margin:.5em 0}}td,th{{border:1px solid #bbb;padding:2px 8px;font-size:13px;text-align:left}}.plots{{display:flex;flex-wrap:wrap;gap:8px}}.plot{{border:1px solid #ddd}}.bad{{background:#fdd;border:2px solid #c00;padding:.5em}}.good{{background:#efe;padding:.5em}}</style></head><body>\n<h1>Quorum nightly, {date}</h1>\n",
        date = esc(&ctx.now.date)
    );
    let _ = write!(
        h,
        "<p>commit <code>{}</code>, matrix {} ({} points), adapter <code>{}</code></p>\n<p>machine: {}, {} logical CPUs, {} threads for CPU kernels, {} GiB, {}</p>\n<ul>",
        esc(&m.commit),
        if m.quick { "quick" } else { "full" },
        m.points.len(),
        esc(&m.adapter_id),
        esc(&m.machine.cpu),
        m.machine.cores,
        m.machine.threads,
        m.machine.memory_gib,
        esc(&m.machine.os)
    );
    for p in &m.providers {
        let _ = write!(
            h,
            "<li>{}: {}</li>",
            esc(&p.provider),
            esc(&match (&p.device, &p.unavailable) {
                (_, Some(why)) => format!("not measured: {why}"),
                (Some(d), None) =>
                    format!("{d}, driver {}", p.driver.as_deref().unwrap_or("unknown")),
                (None, None) => "measured".into(),
            })
        );
    }
    h.push_str("</ul>\n");
    if ctx.now.regressions.is_empty() {
        let _ = writeln!(
            h,
            "<p class=\"good\" id=\"regressions\">No regression. Rule: a median above every p90 of the last {} comparable nights and more than {}% above their median (at least {} nights needed); any drop in a conformance pass count.</p>",
            ctx.rule.window, ctx.rule.pct, ctx.rule.min_nights
        );
    } else {
        h.push_str("<div class=\"bad\" id=\"regressions\"><b>Regressions</b><ul>");
        for r in &ctx.now.regressions {
            let _ = write!(h, "<li>{}</li>", esc(r));
        }
        h.push_str("</ul></div>\n");
    }
    h.push_str("<h2>Time against size, per op family and class</h2>\n<p>Medians with p10-p90 whiskers, log-log; red lines: measured crossovers (where the accelerator starts beating the CPU, inputs on the host or resident). A difference inside the spread decides nothing.</p>\n<div class=\"plots\" id=\"family-plots\">");
    for (title, svg) in family_plots(o)? {
        let _ = write!(
            h,
            "<div class=\"plot\" title=\"{}\">{svg}</div>",
            esc(&title)
        );
    }
    h.push_str("</div>\n<h2>Thresholds</h2>\n");
    if o.tables.is_empty() {
        h.push_str("<p>No accelerator was measured: no thresholds tonight (auto keeps its conservative defaults).</p>\n");
    } else {
        h.push_str("<table><tr><th>adapter</th><th>family</th><th>class</th><th>dtype</th><th>unit</th><th>inputs on the host</th><th>resident</th></tr>");
        for c in &ctx.now.crossovers {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&c.adapter),
                esc(&c.family),
                esc(&c.class),
                esc(&c.dtype),
                esc(&c.unit),
                esc(&c.host),
                esc(&c.resident)
            );
        }
        h.push_str("</table>\n");
    }
    h.push_str("<h2>Model latency per provider, over the nights</h2>\n<div class=\"plots\" id=\"model-plots\">");
    for (title, svg) in model_plots(ctx)? {
        let _ = write!(
            h,
            "<div class=\"plot\" title=\"{}\">{svg}</div>",
            esc(&title)
        );
    }
    h.push_str(
        "</div>\n<table><tr><th>model</th><th>provider</th><th>median ms [p10, p90]</th></tr>",
    );
    for v in &o.models {
        for (p, r) in &v.timings {
            let t = match r {
                Ok(s) => fmt_ms(s),
                Err(e) => format!("failed: {e}"),
            };
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&v.case),
                esc(p),
                esc(&t)
            );
        }
    }
    h.push_str("</table>\n<h2>auto against the best single provider</h2>\n<table><tr><th>case</th><th>best alone</th><th>verdict</th></tr>");
    for v in &o.models {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&v.case),
            esc(v.best.as_deref().unwrap_or("-")),
            esc(&v.verdict)
        );
    }
    let _ = write!(
        h,
        "</table>\n<h2>Conformance over the nights</h2>\n<p>Counts {}.</p>\n<div class=\"plots\" id=\"conformance-plot\"><div class=\"plot\">{}</div></div>\n<table><tr><th>engine</th><th>pass</th><th>fail</th><th>unsupported</th><th>nondeterministic</th><th>total</th></tr>",
        esc(ctx.conformance_source),
        conformance_plot(ctx)?
    );
    for c in &ctx.now.conformance {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&c.engine),
            c.pass,
            c.fail,
            c.unsupported,
            c.nondeterministic,
            c.total
        );
    }
    h.push_str("</table>\n");
    if ctx.models_table {
        let _ = write!(
            h,
            "<h2>Models beside PyTorch</h2>\n<p>{MODELS_LINE}: <a href=\"{MODELS_TABLE}\">{MODELS_TABLE}</a>.</p>\n"
        );
    }
    let _ = write!(
        h,
        "<h2>Graph capture: wins and losses</h2>\n<div class=\"plots\" id=\"graph-plot\"><div class=\"plot\">{}</div></div>\n<table><tr><th>model</th><th>provider</th><th>inputs</th><th>eager ms</th><th>replay ms</th><th>verdict</th></tr>",
        graph_plot(o)?
    );
    for g in &o.graphs {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&g.model),
            esc(&g.provider),
            esc(&g.inputs),
            g.eager.as_ref().map_or("-".into(), fmt_ms),
            g.replay.as_ref().map_or("-".into(), fmt_ms),
            esc(&g.verdict)
        );
    }
    h.push_str("</table>\n</body></html>\n");
    Ok(h)
}

/// The short Markdown summary.
pub fn markdown(ctx: &Context) -> String {
    let m = &ctx.outputs.matrix;
    let mut s = String::new();
    let _ = writeln!(s, "# Quorum nightly, {}\n", ctx.now.date);
    let _ = writeln!(
        s,
        "Commit `{}`; {} matrix of {} points on {} ({} threads); adapter `{}`.\n",
        m.commit,
        if m.quick { "quick" } else { "full" },
        m.points.len(),
        m.machine.cpu,
        m.machine.threads,
        m.adapter_id
    );
    if ctx.now.regressions.is_empty() {
        let _ = writeln!(
            s,
            "**No regression** against the last {} comparable nights.\n",
            ctx.rule.window
        );
    } else {
        let _ = writeln!(s, "**Regressions:**\n");
        for r in &ctx.now.regressions {
            let _ = writeln!(s, "- {r}");
        }
        s.push('\n');
    }
    if ctx.now.crossovers.is_empty() {
        let _ = writeln!(s, "No accelerator measured: no thresholds.\n");
    } else {
        let _ = writeln!(
            s,
            "| adapter | family/class | dtype | host inputs | resident |\n|---|---|---|---|---|"
        );
        for c in &ctx.now.crossovers {
            let _ = writeln!(
                s,
                "| {} | {}/{} | {} | {} {} | {} |",
                c.adapter, c.family, c.class, c.dtype, c.host, c.unit, c.resident
            );
        }
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "| model | provider | median ms [p10, p90] |\n|---|---|---|"
    );
    for l in &ctx.now.models {
        let _ = writeln!(
            s,
            "| {} | {} | {:.3} [{:.3}, {:.3}] |",
            l.model, l.provider, l.median_ms, l.p10_ms, l.p90_ms
        );
    }
    let slower: Vec<&str> = ctx
        .outputs
        .models
        .iter()
        .filter(|v| v.verdict == "slower")
        .map(|v| v.case.as_str())
        .collect();
    let _ = writeln!(
        s,
        "\nauto slower than the best single provider beyond the noise: {}.",
        if slower.is_empty() {
            "none".to_string()
        } else {
            slower.join(", ")
        }
    );
    for c in &ctx.now.conformance {
        let _ = writeln!(
            s,
            "Conformance `{}`: {} pass, {} fail, {} unsupported of {} ({}).",
            c.engine, c.pass, c.fail, c.unsupported, c.total, ctx.conformance_source
        );
    }
    let count = |v: &str| ctx.now.graphs.iter().filter(|g| g.verdict == v).count();
    let _ = writeln!(
        s,
        "Graph capture: {} wins, {} losses, {} undecided, {} refused or failed.",
        count("win"),
        count("loss"),
        count("undecided"),
        ctx.now.graphs.len() - count("win") - count("loss") - count("undecided")
    );
    if ctx.models_table {
        let _ = writeln!(s, "\n{MODELS_LINE}: [{MODELS_TABLE}]({MODELS_TABLE}).");
    }
    s
}
