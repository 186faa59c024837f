//! The launch audit: a kernel's declared accesses (`Arg::In`, `Arg::Out`) checked against what it
//! does on the device.
//!
//! The command log records each launch's reads and writes from its declaration, and the stream
//! checker judges the run from those; a declaration that leaves out a byte a kernel touches would
//! hide exactly the race the checker exists for. An audited launch therefore runs alone (every
//! stream waited for) over a snapshot of all the memory the run can reach, twice:
//!
//! 1. as it is: every byte that changed must lie in a declared write;
//! 2. again from the same state, with every byte the launch did not declare (read or write)
//!    poisoned: the declared writes must come out bit for bit the same, or the kernel read memory
//!    it did not declare.
//!
//! Afterwards the memory is as the first launch left it, so the run goes on with the right numbers.
//! Kernels are deterministic (no atomics; fault words are plain stores), which the second
//! comparison relies on. The audit cannot see a read whose value does not change the result
//! (a load masked out) nor memory outside the run (it only snapshots what the run reaches and what
//! the launch declares).
use crate::driver::{Arg, Function};
use crate::run::Run;
use crate::{KError, KResult};
use quorum_core::error::OpError;

/// The byte every undeclared byte is set to for the second launch (NaN in every float type, -1 in
/// every signed integer).
const POISON: u8 = 0xFF;

/// `(start, end)` byte intervals.
type Intervals = Vec<(u64, u64)>;

/// Disjoint, sorted `(start, end)` intervals covering `ranges`.
fn merged(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.retain(|r| r.1 > r.0);
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (s, e) in ranges {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

fn covered(set: &[(u64, u64)], addr: u64) -> bool {
    let i = set.partition_point(|r| r.1 <= addr);
    set.get(i).is_some_and(|r| r.0 <= addr)
}

/// The `(start, end)` areas an audit copies: each allocation the run reaches once (copies may not
/// cross from one allocation into the next, however close their addresses), then each declared
/// interval that lies in none of them (memory outside the run), sorted by address.
fn areas(
    reachable: Vec<(u64, u64)>,
    reads: &[(u64, u64)],
    writes: &[(u64, u64)],
) -> Vec<(u64, u64)> {
    let mut by_start: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
    for (p, n) in reachable {
        let e = by_start.entry(p).or_insert(p + n);
        *e = (*e).max(p + n);
    }
    let mut out: Vec<(u64, u64)> = by_start.into_iter().filter(|r| r.1 > r.0).collect();
    let inside = |out: &[(u64, u64)], r: &(u64, u64)| out.iter().any(|a| a.0 <= r.0 && r.1 <= a.1);
    // Declarations outside every allocation, not merged (two weights side by side are two
    // allocations); one inside another is dropped.
    let mut outside: Vec<(u64, u64)> = reads.iter().chain(writes).copied().collect();
    outside.sort_unstable_by_key(|r| (r.0, std::cmp::Reverse(r.1)));
    for r in outside {
        if r.1 > r.0 && !inside(&out, &r) {
            out.push(r);
        }
    }
    out.sort_unstable();
    out
}

/// A declared interval that starts in one area and ends beyond it, with that area.
fn past_its_area(
    areas: &[(u64, u64)],
    reads: &[(u64, u64)],
    writes: &[(u64, u64)],
) -> Option<((u64, u64), (u64, u64))> {
    reads.iter().chain(writes).find_map(|r| {
        areas
            .iter()
            .find(|a| a.0 < r.1 && r.0 < a.1 && !(a.0 <= r.0 && r.1 <= a.1))
            .map(|a| (*r, *a))
    })
}

/// The declared reads and writes of `args`, as given (empty ones left out). Merge them
/// ([`merged`]) only to ask whether a byte is covered: adjacent declarations may be two
/// allocations.
pub(crate) fn declared(args: &[Arg]) -> (Intervals, Intervals) {
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    for a in args {
        match *a {
            Arg::In(p, n) if n > 0 => reads.push((p, p + n as u64)),
            Arg::Out(p, n) if n > 0 => writes.push((p, p + n as u64)),
            _ => {}
        }
    }
    (reads, writes)
}

/// The first address in `[start, ..)` where `a` and `b` differ and `keep` says so.
fn first_difference(a: &[u8], b: &[u8], start: u64, keep: impl Fn(u64) -> bool) -> Option<u64> {
    a.iter()
        .zip(b)
        .enumerate()
        .find(|(i, (x, y))| x != y && keep(start + *i as u64))
        .map(|(i, _)| start + i as u64)
}

impl Run<'_> {
    fn snapshot(&self, areas: &[(u64, u64)]) -> KResult<Vec<Vec<u8>>> {
        let stream = self.stream();
        let mut out = Vec::with_capacity(areas.len());
        for &(s, e) in areas {
            let mut v = vec![0u8; (e - s) as usize];
            stream.download(&mut v, s)?;
            out.push(v);
        }
        stream.synchronize()?;
        Ok(out)
    }

    fn restore(&self, areas: &[(u64, u64)], bytes: &[Vec<u8>]) -> KResult<()> {
        let stream = self.stream();
        for (&(s, _), b) in areas.iter().zip(bytes) {
            stream.upload(s, b)?;
        }
        Ok(stream.synchronize()?)
    }

    /// Launches `f` as [`crate::audit`] describes, failing with an error that names the kernel and
    /// the first byte that breaks its declaration.
    pub(crate) fn audited_launch(
        &self,
        f: &Function,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared: u32,
        args: &[Arg],
    ) -> KResult<()> {
        self.synchronize()?;
        let (reads, writes) = declared(args);
        let areas = areas(self.reachable(), &reads, &writes);
        if let Some((r, a)) = past_its_area(&areas, &reads, &writes) {
            return Err(KError::Op(OpError::Invalid(format!(
                "launch audit: kernel {} (node {}) declares {} which runs past the allocation {}",
                f.name,
                self.node_name(),
                show(&[r]),
                show(&[a])
            ))));
        }
        let (reads, writes) = (merged(reads), merged(writes));
        let stream = self.stream();
        let before = self.snapshot(&areas)?;
        f.launch(stream, grid, block, shared, args)?;
        stream.synchronize()?;
        let after = self.snapshot(&areas)?;
        let fail = |what: String| {
            KError::Op(OpError::Invalid(format!(
                "launch audit: kernel {} (node {}) {what}",
                f.name,
                self.node_name()
            )))
        };
        for (i, &(s, _)) in areas.iter().enumerate() {
            if let Some(a) = first_difference(&before[i], &after[i], s, |a| !covered(&writes, a)) {
                return Err(fail(format!(
                    "wrote {} outside its declared writes {}",
                    at(a, &areas),
                    show(&writes)
                )));
            }
        }
        // The same launch from the same state, every undeclared byte poisoned.
        let poisoned: Vec<Vec<u8>> = areas
            .iter()
            .zip(&before)
            .map(|(&(s, _), b)| {
                b.iter()
                    .enumerate()
                    .map(|(i, &x)| {
                        let a = s + i as u64;
                        if covered(&reads, a) || covered(&writes, a) {
                            x
                        } else {
                            POISON
                        }
                    })
                    .collect()
            })
            .collect();
        self.restore(&areas, &poisoned)?;
        f.launch(stream, grid, block, shared, args)?;
        stream.synchronize()?;
        let again = self.snapshot(&areas)?;
        self.restore(&areas, &after)?;
        for (i, &(s, _)) in areas.iter().enumerate() {
            if let Some(a) = first_difference(&after[i], &again[i], s, |a| covered(&writes, a)) {
                return Err(fail(format!(
                    "reads memory it does not declare: its write at {} changed when the bytes \
                     outside its declared reads {} and writes {} were poisoned",
                    at(a, &areas),
                    show(&reads),
                    show(&writes)
                )));
            }
        }
        Ok(())
    }
}

/// An address as the area it lies in and its offset there.
fn at(addr: u64, areas: &[(u64, u64)]) -> String {
    match areas.iter().find(|r| r.0 <= addr && addr < r.1) {
        Some(r) => format!("byte {} of the area at {:#x}", addr - r.0, r.0),
        None => format!("{addr:#x}"),
    }
}

fn show(set: &[(u64, u64)]) -> String {
    let parts: Vec<String> = set
        .iter()
        .map(|(s, e)| format!("{s:#x}+{}", e - s))
        .collect();
    format!("[{}]", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_merge_and_cover() {
        let m = merged(vec![(10, 20), (0, 5), (15, 30), (40, 40), (5, 6)]);
        assert_eq!(m, vec![(0, 6), (10, 30)]);
        assert!(covered(&m, 0) && covered(&m, 5) && covered(&m, 29));
        assert!(!covered(&m, 6) && !covered(&m, 9) && !covered(&m, 30));
    }

    #[test]
    fn areas_are_whole_allocations_never_joined() {
        // Two allocations back to back, the first reached twice (a view), and a declared read
        // inside the second and one outside both.
        let a = areas(
            vec![(0, 256), (256, 256), (0, 256)],
            &[(300, 400), (1000, 1010), (1010, 1020), (1000, 1005)],
            &[(10, 20)],
        );
        assert_eq!(a, vec![(0, 256), (256, 512), (1000, 1010), (1010, 1020)]);
        assert_eq!(past_its_area(&a, &[(300, 400)], &[(10, 20)]), None);
        // A write declared from inside the first allocation into the second.
        let a = areas(vec![(0, 256), (256, 256)], &[], &[(200, 300)]);
        assert_eq!(
            past_its_area(&a, &[], &[(200, 300)]),
            Some(((200, 300), (0, 256)))
        );
    }

    #[test]
    fn declarations_split_into_reads_and_writes() {
        let (r, w) = declared(&[
            Arg::In(100, 8),
            Arg::U32(7),
            Arg::Out(200, 4),
            Arg::In(108, 8),
            Arg::In(0, 0),
        ]);
        assert_eq!(r, vec![(100, 108), (108, 116)]);
        assert_eq!(w, vec![(200, 204)]);
        // Two adjacent allocations, each read whole: no declaration runs past its own (the
        // H100 run once merged them first and reported a LayerNormalization's scale and bias).
        let a = areas(vec![(100, 8), (108, 8)], &r, &w);
        assert_eq!(past_its_area(&a, &r, &w), None);
        assert_eq!(merged(r), vec![(100, 116)]);
    }

    #[test]
    fn a_difference_counts_only_where_asked() {
        let a = [1u8, 2, 3, 4];
        let b = [1u8, 9, 3, 8];
        assert_eq!(first_difference(&a, &b, 100, |_| true), Some(101));
        assert_eq!(first_difference(&a, &b, 100, |x| x != 101), Some(103));
        assert_eq!(first_difference(&a, &b, 100, |x| x < 101), None);
    }
}
