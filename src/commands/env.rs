//! `llm-oom env`: what matters for GPU memory on this machine — the GPUs and who holds them, the
//! driver's CUDA, host RAM, how this llm-oom was built, the user's Python packages and the
//! allocator's settings — for a report pasted into an issue (as `transformers env` gives).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::meter::gpu::{read_all, AllGpus, GpuInfo};
use crate::meter::host::host_memory;
use crate::probe::session::wait_for;
use crate::units::Bytes;

/// The Python packages whose versions change what memory a model takes.
pub const PACKAGES: &[&str] = &[
    "torch",
    "transformers",
    "accelerate",
    "vllm",
    "sglang",
    "bitsandbytes",
    "flash-attn",
    "llama-cpp-python",
    "peft",
];

/// Environment variables that change how memory is allocated or which GPUs are seen.
pub const VARIABLES: &[&str] = &[
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "CUDA_VISIBLE_DEVICES",
    "HF_HUB_OFFLINE",
];

/// The most a Python interpreter may take to answer (a cold `importlib.metadata` is ~0.1 s).
const PYTHON_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, Clone)]
pub struct EnvRequest {
    /// The interpreter to ask for package versions (`--python`, `LLM_OOM_PYTHON`, `python3`).
    pub python: PathBuf,
}

#[derive(Debug, Clone, Serialize)]
pub struct EnvReport {
    pub command: &'static str,
    pub version: &'static str,
    pub build: Build,
    pub gpus: Vec<EnvGpu>,
    /// Why no GPU is listed (no driver, no NVML).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_note: Option<String>,
    /// The CUDA version the driver supports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_driver: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_total_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_available_bytes: Option<u64>,
    pub python: PythonFacts,
    /// The variables of [`VARIABLES`] that are set, as set.
    pub variables: BTreeMap<String, String>,
}

/// How this binary was built.
#[derive(Debug, Clone, Serialize)]
pub struct Build {
    /// The probe's candle runtime can run on CUDA.
    pub cuda: bool,
    /// `CUDA_COMPUTE_CAP` at build time (90 = Hopper), when built with CUDA.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<&'static str>,
    pub target: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct EnvGpu {
    #[serde(flatten)]
    pub info: GpuInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PythonFacts {
    #[serde(default)]
    pub interpreter: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Every package of [`PACKAGES`]: its version, or `None` when not installed.
    #[serde(default)]
    pub packages: BTreeMap<String, Option<String>>,
    /// Why the interpreter could not be asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Build {
    pub fn this() -> Build {
        Build {
            cuda: cfg!(feature = "cuda"),
            compute_capability: if cfg!(feature = "cuda") {
                option_env!("CUDA_COMPUTE_CAP")
            } else {
                None
            },
            target: format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS),
        }
    }

    /// `cuda (sm_90)` or `no cuda`, as `--version` and report footers say it.
    pub fn features(&self) -> String {
        match (self.cuda, self.compute_capability) {
            (true, Some(cc)) => format!("cuda (sm_{cc})"),
            (true, None) => "cuda".into(),
            (false, _) => "no cuda: diagnose's own runtime is CPU-only".into(),
        }
    }
}

pub fn env(req: &EnvRequest) -> EnvReport {
    let (gpus, cuda_driver, gpu_note) = match read_all() {
        Ok(AllGpus {
            gpus,
            cuda_driver: cuda,
        }) => (
            gpus.into_iter()
                .map(|(info, compute_capability)| EnvGpu {
                    info,
                    compute_capability,
                })
                .collect(),
            cuda,
            None,
        ),
        Err(note) => (Vec::new(), None, Some(note)),
    };
    let host = host_memory();
    EnvReport {
        command: "env",
        version: env!("CARGO_PKG_VERSION"),
        build: Build::this(),
        gpus,
        gpu_note,
        cuda_driver,
        host_total_bytes: host.map(|h| h.0),
        host_available_bytes: host.map(|h| h.1),
        python: python_facts(&req.python),
        variables: VARIABLES
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
            .collect(),
    }
}

/// One line for the foot of a Markdown report: the build, the GPUs and the host, no Python (so a
/// `plan --markdown` stays a few milliseconds).
pub fn short_line() -> String {
    let build = Build::this();
    let gpus = match read_all() {
        Ok(AllGpus {
            gpus,
            cuda_driver: cuda,
        }) if !gpus.is_empty() => {
            let names: Vec<String> = gpus
                .iter()
                .map(|(g, _)| format!("{} {}", g.name, Bytes(g.total_bytes)))
                .collect();
            let driver = gpus
                .first()
                .map(|(g, _)| g.driver.clone())
                .unwrap_or_default();
            format!(
                "{} · driver {driver}{}",
                names.join(", "),
                cuda.map(|c| format!(", CUDA {c}")).unwrap_or_default()
            )
        }
        _ => "no NVIDIA GPU seen".into(),
    };
    let host = host_memory()
        .map(|h| format!(" · host {}", Bytes(h.0)))
        .unwrap_or_default();
    format!(
        "environment: {gpus}{host} · this build: {}",
        build.features()
    )
}

/// Ask `python` for its version and the packages' versions, without importing them (fast, and
/// safe when one is broken).
pub fn python_facts(python: &Path) -> PythonFacts {
    let script = format!(
        "import json, sys, importlib.metadata as m\n\
         def v(n):\n    try:\n        return m.version(n)\n    except Exception:\n        return None\n\
         print(json.dumps({{'version': sys.version.split()[0], 'packages': {{n: v(n) for n in {:?}}}}}))\n",
        PACKAGES
    );
    let mut facts = PythonFacts {
        interpreter: python.display().to_string(),
        ..PythonFacts::default()
    };
    match run_python(python, &script) {
        Ok(out) => match serde_json::from_str::<PythonFacts>(out.trim()) {
            Ok(p) => {
                facts.version = p.version;
                facts.packages = p.packages;
            }
            Err(e) => facts.note = Some(format!("its answer was not understood ({e})")),
        },
        Err(why) => facts.note = Some(why),
    }
    facts
}

fn run_python(python: &Path, script: &str) -> Result<String, String> {
    let mut child = Command::new(python)
        .args(["-I", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{} cannot be run ({e})", python.display()))?;
    let started = Instant::now();
    let status = wait_for(&mut child, PYTHON_TIMEOUT);
    if started.elapsed() >= PYTHON_TIMEOUT {
        return Err(format!(
            "{} did not answer within {} s",
            python.display(),
            PYTHON_TIMEOUT.as_secs()
        ));
    }
    let mut out = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut out);
    }
    match status {
        Some(s) if s.success() => Ok(out),
        Some(s) => Err(format!("{} exited with {s}", python.display())),
        None => Err(format!("{} could not be waited for", python.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_interpreter_is_a_note() {
        let p = python_facts(Path::new("/nonexistent/python3"));
        assert!(p.note.is_some_and(|n| n.contains("cannot be run")));
        assert!(p.packages.is_empty());
    }

    #[test]
    fn the_build_says_whether_it_has_cuda() {
        let b = Build::this();
        assert_eq!(b.cuda, cfg!(feature = "cuda"));
        assert!(b.features().contains("cuda"));
    }
}
