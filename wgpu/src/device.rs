//! The adapter and device, chosen once per process at run time, and what lives as long as they do:
//! the buffer pools, the bind-group layouts and the pipeline cache (keyed by generated WGSL source).
//!
//! Adapter choice: `QUORUM_WGPU_ADAPTER=TEXT` picks the first adapter whose name or driver contains
//! `TEXT` (case-insensitive), software ones included; otherwise the best hardware adapter (discrete,
//! integrated, virtual, other), and a software adapter (llvmpipe/lavapipe, SwiftShader) only when it
//! is the only one. `auto` passes over a software adapter unless it was named (see
//! [`Device::auto_usable`]).
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use super::memory::{Pool, Usage};
use quorum_core::counters::Counters;

/// What the chosen adapter offers that kernels care about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// `f64` in shaders: the accurate transcendental functions and correctly rounded division and
    /// square root are computed in f64 and rounded once.
    pub f64: bool,
    /// `i64`/`u64` in shaders: 64-bit integer arithmetic.
    pub i64: bool,
    pub subgroups: bool,
    pub timestamps: bool,
    /// The adapter offers `shader-f16`. Not requested: 16-bit floats are held one per word and
    /// computed in f32 with exact conversions (`super::wgsl::HALF`), which WGSL's own f32-to-f16
    /// conversion does not promise, and arithmetic in f16 would not meet the f32 accuracy that the
    /// verification bounds assume.
    pub f16_offered: bool,
}

/// A kernel signature's bind-group layout and the pipeline layout made of it.
type Layouts = (wgpu::BindGroupLayout, wgpu::PipelineLayout);

/// A compiled kernel and the layout it binds with.
pub struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: Arc<wgpu::BindGroupLayout>,
}

/// The process's wgpu device.
pub struct Device {
    pub info: wgpu::AdapterInfo,
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub caps: Caps,
    pub limits: wgpu::Limits,
    /// A CPU adapter (llvmpipe/lavapipe, SwiftShader): correct but slow.
    pub software: bool,
    /// Chosen by `QUORUM_WGPU_ADAPTER`.
    pub named: bool,
    /// Storage buffers (kernel operands, parameters).
    pub pool: Arc<Pool>,
    /// Host-readable buffers that downloads copy into.
    pub readback: Arc<Pool>,
    pipelines: Mutex<HashMap<String, Arc<Pipeline>>>,
    /// Pipelines by a short key that determines their source (`Device::pipeline_keyed`).
    keyed: Mutex<HashMap<String, Arc<Pipeline>>>,
    /// Layouts by (read-write, read-only) storage buffer counts (`Device::layout`).
    layouts: Mutex<HashMap<(usize, usize), Arc<Layouts>>>,
    /// Errors wgpu reported outside any error scope (validation of a submit, device loss), taken by
    /// the run that next waits for the device.
    errors: Arc<Mutex<Vec<String>>>,
    dump_dir: Option<PathBuf>,
}

/// Whether an adapter computes on the CPU.
fn is_software(info: &wgpu::AdapterInfo) -> bool {
    let name = format!("{} {}", info.name, info.driver).to_lowercase();
    info.device_type == wgpu::DeviceType::Cpu
        || ["llvmpipe", "lavapipe", "swiftshader", "warp"]
            .iter()
            .any(|s| name.contains(s))
}

/// The adapters wgpu finds here (every backend this build has).
pub fn adapters() -> Vec<wgpu::Adapter> {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY);
    let instance = wgpu::Instance::new(desc);
    pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()))
}

/// One adapter in words: name, backend, type, driver.
pub fn describe(info: &wgpu::AdapterInfo) -> String {
    format!(
        "{} ({:?}, {:?}, driver {} {})",
        info.name, info.backend, info.device_type, info.driver, info.driver_info
    )
}

fn choose(adapters: Vec<wgpu::Adapter>) -> Result<(wgpu::Adapter, bool), String> {
    if adapters.is_empty() {
        return Err(
            "no wgpu adapter: no Vulkan, Metal or DX12 driver was found (on Debian, \
                    `apt-get install mesa-vulkan-drivers` gives lavapipe, a software Vulkan)"
                .into(),
        );
    }
    if let Ok(want) = std::env::var("QUORUM_WGPU_ADAPTER") {
        let w = want.to_lowercase();
        let listed: Vec<String> = adapters.iter().map(|a| describe(&a.get_info())).collect();
        return adapters
            .into_iter()
            .find(|a| {
                let i = a.get_info();
                format!("{} {}", i.name, i.driver)
                    .to_lowercase()
                    .contains(&w)
            })
            .map(|a| (a, true))
            .ok_or_else(|| {
                format!(
                    "no wgpu adapter matches QUORUM_WGPU_ADAPTER={want}; adapters here: {}",
                    listed.join("; ")
                )
            });
    }
    let rank = |a: &wgpu::Adapter| {
        let i = a.get_info();
        if is_software(&i) {
            return 9;
        }
        match i.device_type {
            wgpu::DeviceType::DiscreteGpu => 0,
            wgpu::DeviceType::IntegratedGpu => 1,
            wgpu::DeviceType::VirtualGpu => 2,
            _ => 3,
        }
    };
    let best = adapters
        .into_iter()
        .min_by_key(rank)
        .ok_or("no wgpu adapter")?;
    Ok((best, false))
}

impl Device {
    /// The process's device, opened on first use. `Err` says why there is none; nothing panics.
    pub fn get() -> Result<Arc<Device>, String> {
        static DEVICE: OnceLock<Result<Arc<Device>, String>> = OnceLock::new();
        DEVICE.get_or_init(Device::open).clone()
    }

    fn open() -> Result<Arc<Device>, String> {
        let found = std::panic::catch_unwind(adapters)
            .map_err(|_| "wgpu failed while looking for adapters".to_string())?;
        let (adapter, named) = choose(found)?;
        let info = adapter.get_info();
        let have = adapter.features();
        let mut want = wgpu::Features::empty();
        for f in [
            wgpu::Features::SHADER_F64,
            wgpu::Features::SHADER_INT64,
            wgpu::Features::SUBGROUP,
            wgpu::Features::TIMESTAMP_QUERY,
        ] {
            if have.contains(f) {
                want |= f;
            }
        }
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("quorum"),
            required_features: want,
            required_limits: limits.clone(),
            experimental_features: Default::default(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: Default::default(),
        }))
        .map_err(|e| format!("{}: requesting a device: {e}", describe(&info)))?;
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            sink.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(e.to_string());
        }));
        let sink = errors.clone();
        device.set_device_lost_callback(move |reason, msg| {
            sink.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("device lost ({reason:?}): {msg}"));
        });
        // Leave room for others; QUORUM_WGPU_BUDGET (bytes) overrides.
        let budget = std::env::var("QUORUM_WGPU_BUDGET")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(8u64 << 30);
        let caps = Caps {
            f64: want.contains(wgpu::Features::SHADER_F64),
            i64: want.contains(wgpu::Features::SHADER_INT64),
            subgroups: want.contains(wgpu::Features::SUBGROUP),
            timestamps: want.contains(wgpu::Features::TIMESTAMP_QUERY),
            f16_offered: have.contains(wgpu::Features::SHADER_F16),
        };
        Ok(Arc::new(Device {
            software: is_software(&info),
            named,
            pool: Arc::new(Pool::new(
                device.clone(),
                Usage::Storage,
                budget,
                limits.max_storage_buffer_binding_size,
            )),
            readback: Arc::new(Pool::new(
                device.clone(),
                Usage::Readback,
                budget,
                limits.max_buffer_size,
            )),
            info,
            device,
            queue,
            caps,
            limits,
            pipelines: Mutex::new(HashMap::new()),
            keyed: Mutex::new(HashMap::new()),
            layouts: Mutex::new(HashMap::new()),
            errors,
            dump_dir: std::env::var_os("QUORUM_DUMP_WGSL").map(PathBuf::from),
        }))
    }

    /// Whether `auto` uses this device: a hardware adapter, or a software one named by
    /// `QUORUM_WGPU_ADAPTER`.
    pub fn auto_usable(&self) -> Result<(), String> {
        if self.software && !self.named {
            return Err(format!(
                "{} is a software adapter: `auto` leaves it out (name it with --provider wgpu or \
                 QUORUM_WGPU_ADAPTER)",
                self.info.name
            ));
        }
        Ok(())
    }

    /// The device in words, with what it offers.
    pub fn describe(&self) -> String {
        let mut offers = Vec::new();
        if self.caps.f64 {
            offers.push("f64");
        }
        if self.caps.i64 {
            offers.push("i64");
        }
        if self.caps.subgroups {
            offers.push("subgroups");
        }
        if self.caps.timestamps {
            offers.push("timestamps");
        }
        format!(
            "{}{}; shaders with {}",
            describe(&self.info),
            if self.software { ", software" } else { "" },
            if offers.is_empty() {
                "no optional features".to_string()
            } else {
                offers.join(", ")
            }
        )
    }

    /// The bind-group layout of kernels with `outs` read-write and `ins` read-only storage buffers
    /// after the parameter buffer (binding 0).
    fn layout(
        &self,
        outs: usize,
        ins: usize,
    ) -> Arc<(wgpu::BindGroupLayout, wgpu::PipelineLayout)> {
        let mut layouts = self.layouts.lock().unwrap_or_else(|e| e.into_inner());
        layouts
            .entry((outs, ins))
            .or_insert_with(|| {
                let entry = |binding: u32, read_only: bool| wgpu::BindGroupLayoutEntry {
                    binding,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Storage { read_only },
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                };
                let mut entries = vec![entry(0, true)];
                for b in 0..outs {
                    entries.push(entry(1 + b as u32, false));
                }
                for b in 0..ins {
                    entries.push(entry(1 + (outs + b) as u32, true));
                }
                let bgl = self
                    .device
                    .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                        label: None,
                        entries: &entries,
                    });
                let pl = self
                    .device
                    .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                        label: None,
                        bind_group_layouts: &[Some(&bgl)],
                        immediate_size: 0,
                    });
                Arc::new((bgl, pl))
            })
            .clone()
    }

    /// The pipeline of a generated kernel: looked up by its WGSL text, compiled on a miss (a
    /// compilation error is returned with wgpu's message, never a panic).
    pub fn pipeline(
        &self,
        name: &str,
        src: &str,
        outs: usize,
        ins: usize,
        counters: &Counters,
    ) -> Result<Arc<Pipeline>, String> {
        if let Some(p) = self
            .pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(src)
        {
            Counters::bump(&counters.module_hits, 1);
            return Ok(p.clone());
        }
        Counters::bump(&counters.module_misses, 1);
        if let Some(dir) = &self.dump_dir {
            let _ = std::fs::create_dir_all(dir);
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            src.hash(&mut h);
            let _ = std::fs::write(dir.join(format!("{name}-{:016x}.wgsl", h.finish())), src);
        }
        let layout = self.layout(outs, ins);
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(name),
                source: wgpu::ShaderSource::Wgsl(src.into()),
            });
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(name),
                layout: Some(&layout.1),
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(format!("WGSL kernel {name} did not compile: {e}"));
        }
        let p = Arc::new(Pipeline {
            pipeline,
            layout: Arc::new(layout.0.clone()),
        });
        self.pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(src.to_string(), p.clone());
        Ok(p)
    }

    /// The pipeline of a kernel named by `key`, a short text that determines its source: looked up
    /// by the key, and only on a miss is `build` asked for the source (compiled through
    /// [`Device::pipeline`]). For kernels whose source is long to generate and to hash (the GEMM
    /// template's unrolled steps: tens of kilobytes per launch).
    pub fn pipeline_keyed(
        &self,
        name: &str,
        key: &str,
        build: impl FnOnce() -> String,
        outs: usize,
        ins: usize,
        counters: &Counters,
    ) -> Result<Arc<Pipeline>, String> {
        if let Some(p) = self
            .keyed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
        {
            Counters::bump(&counters.module_hits, 1);
            return Ok(p.clone());
        }
        let p = self.pipeline(name, &build(), outs, ins, counters)?;
        self.keyed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_string(), p.clone());
        Ok(p)
    }

    /// The number of compiled pipelines held.
    pub fn pipelines_cached(&self) -> usize {
        self.pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Errors wgpu reported outside a scope since the last call (taken).
    pub fn take_errors(&self) -> Vec<String> {
        std::mem::take(&mut *self.errors.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Every adapter wgpu finds here, in words, with whether the backend would pick it (for
/// `quorum info`).
pub fn adapter_report() -> Vec<String> {
    let found = match std::panic::catch_unwind(adapters) {
        Ok(a) => a,
        Err(_) => return vec!["wgpu failed while looking for adapters".into()],
    };
    found
        .iter()
        .map(|a| {
            let i = a.get_info();
            format!(
                "{}{}",
                describe(&i),
                if is_software(&i) { " [software]" } else { "" }
            )
        })
        .collect()
}
