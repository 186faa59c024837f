//! `quorum bench --io`: how a timed run's inputs and outputs cross between host and device, as
//! onnxruntime_perf_test's `-I` binds them: host tensors through `Session::run`, pinned tensors
//! (`Session::pin`, `Session::run_into`), or values kept on the device (`Session::run_bound`).
use std::sync::Arc;
use std::time::Instant;

use quorum::session::{Bound, PinnedTensor};
use quorum::{Error, Session, Value};

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Io {
    /// `Session::run`: host tensors in, fresh host tensors out.
    Host,
    /// Inputs and outputs in host tensors page-locked once: no host copy either way.
    Pinned,
    /// Inputs copied to the device once and outputs left there: nothing crosses the bus.
    Device,
}

impl Io {
    pub fn name(self) -> &'static str {
        match self {
            Io::Host => "host",
            Io::Pinned => "pinned",
            Io::Device => "device",
        }
    }
}

/// One thread's repeated runs of a session under one [`Io`].
pub enum Runner<'s> {
    Host {
        session: &'s Session,
        inputs: Vec<(String, Value)>,
    },
    Pinned {
        session: &'s Session,
        inputs: Vec<(String, Arc<PinnedTensor>)>,
        outputs: Vec<(String, PinnedTensor)>,
    },
    Device {
        session: &'s Session,
        inputs: Vec<(String, Bound)>,
        keep: Vec<String>,
    },
}

/// The tensor of a run value, or an error naming it.
fn tensor(name: &str, v: &Value) -> quorum::Result<quorum::Tensor> {
    v.as_tensor().cloned().ok_or_else(|| Error::Input {
        name: name.to_string(),
        msg: "is not a tensor, which --io pinned|device needs".into(),
    })
}

impl<'s> Runner<'s> {
    /// The runner for `io` over `inputs`: pinned tensors are page-locked here (the outputs' shapes
    /// from one untimed run), device values copied here, both once.
    pub fn new(io: Io, session: &'s Session, inputs: &[(String, Value)]) -> quorum::Result<Self> {
        Ok(match io {
            Io::Host => Runner::Host {
                session,
                inputs: inputs.to_vec(),
            },
            Io::Pinned => {
                let pinned = inputs
                    .iter()
                    .map(|(n, v)| Ok((n.clone(), Arc::new(session.pin(tensor(n, v)?)?))))
                    .collect::<quorum::Result<_>>()?;
                let outputs = session
                    .run(inputs.to_vec())?
                    .into_iter()
                    .map(|(n, v)| {
                        let t = tensor(&n, &v)?;
                        Ok((n, session.pin(t)?))
                    })
                    .collect::<quorum::Result<_>>()?;
                Runner::Pinned {
                    session,
                    inputs: pinned,
                    outputs,
                }
            }
            Io::Device => {
                let on_device = inputs
                    .iter()
                    .map(|(n, v)| {
                        Ok((n.clone(), Bound::Device(session.to_device(&tensor(n, v)?)?)))
                    })
                    .collect::<quorum::Result<_>>()?;
                let keep = session
                    .model()
                    .graph
                    .outputs
                    .iter()
                    .map(|o| o.name.clone())
                    .collect();
                Runner::Device {
                    session,
                    inputs: on_device,
                    keep,
                }
            }
        })
    }

    /// One run, timed from the call to its outputs (host inputs are cloned before the clock
    /// starts, as a caller would hold them), in milliseconds.
    pub fn run(&mut self) -> quorum::Result<f64> {
        Ok(match self {
            Runner::Host { session, inputs } => {
                let batch = inputs.clone();
                let t = Instant::now();
                session.run(batch)?;
                t.elapsed().as_secs_f64() * 1e3
            }
            Runner::Pinned {
                session,
                inputs,
                outputs,
            } => {
                let bound = inputs
                    .iter()
                    .map(|(n, p)| (n.clone(), Bound::Pinned(p.clone())))
                    .collect();
                let mut into: Vec<(&str, &mut PinnedTensor)> =
                    outputs.iter_mut().map(|(n, p)| (n.as_str(), p)).collect();
                let t = Instant::now();
                session.run_into(bound, &mut into)?;
                t.elapsed().as_secs_f64() * 1e3
            }
            Runner::Device {
                session,
                inputs,
                keep,
            } => {
                let batch = inputs.clone();
                let keep: Vec<&str> = keep.iter().map(String::as_str).collect();
                let t = Instant::now();
                session.run_bound(batch, &keep)?;
                t.elapsed().as_secs_f64() * 1e3
            }
        })
    }
}
