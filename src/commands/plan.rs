//! `llm-oom plan`: does a model fit, with what prompt, new tokens and concurrency — from the config
//! alone, in milliseconds.

use serde::Serialize;

use crate::budget::card::{self, DeviceFacts};
use crate::budget::{Budget, Planner, WhatIf};
use crate::error::InputError;
use crate::error::Result;
use crate::estimate::deployment::{Deployment, Draft};
use crate::estimate::{kv_bytes_per_token, state_bytes};
use crate::estimate::{
    kv_bytes_per_token_at, CachePolicy, Calibration, Engine, Estimate, LlamaCppArgs, Profile,
    Workload,
};
use crate::model::derive::{derive, derive_text, DeriveError, Derived, TIMEOUT};
use crate::model::{facts, presets, resolve, ModelFacts, ModelSource, ResolvedModel, SourceKind};
use crate::placement::accelerate::Place;
use crate::placement::llamacpp::{fitting_ngl, plan_layers, Split};
use crate::placement::{fitting_max_memory, plan_auto, vllm, Devices, Fix, Placement};
use crate::request::{past_context, WorkloadRequest};
use crate::verdict::placed::from_placement;
use crate::verdict::predicted::forecast;
use crate::verdict::{Remedy, Verdict};

/// What `plan` takes: a model, a workload and a card.
pub type PlanRequest = WorkloadRequest;

#[derive(Debug, Clone, Serialize)]
pub struct EngineFacts {
    pub name: Engine,
    pub calibration: Calibration,
    pub note: String,
    /// The server in front of the engine (`ollama`, which launches llama-server).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<&'static str>,
}

/// The plan, as one value every renderer reads. Field names are the JSON contract.
#[derive(Debug, Clone, Serialize)]
pub struct PlanReport {
    pub command: &'static str,
    pub version: &'static str,
    pub verdict: Verdict,
    pub remedies: Vec<Remedy>,
    pub model: ModelFacts,
    pub workload: Workload,
    pub device: DeviceFacts,
    pub engine: EngineFacts,
    pub weights_bytes: u64,
    /// Where `weights_bytes` comes from: the checkpoint's own tensor table (`safetensors_headers`,
    /// `gguf`) or the tensor shapes the config implies (`config`).
    pub weights_from: WeightsFrom,
    pub kv_cache_bytes_per_token: u64,
    pub kv_cache_bytes: u64,
    pub components: Estimate,
    pub budget: Budget,
    pub quantization: Vec<WhatIf>,
    /// Where `device_map="auto"` puts each part, per device: with several GPUs, or when the
    /// weights do not fit the one card (the offload answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    /// With one card the workload does not fit: what more GPUs of that card would do, priced
    /// per device by the engine's placement (`--tensor-parallel-size`, `device_map`, `-ts`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub across_gpus: Vec<Remedy>,
    /// ollama: the tag, the context and the llama-server it launches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ollama: Option<OllamaFacts>,
    /// llama-server's own choice (`-c 0`, `--fit`): its slots, the context it loads with, the
    /// layers it keeps on the GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llama_server: Option<crate::estimate::llamacpp_fit::Fitted>,
    /// vLLM on one card: its start-up check (KV cache memory, blocks, concurrency).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vllm_startup: Option<crate::estimate::VllmStartup>,
    /// SGLang on one card: its token pool (`max_total_num_tokens`) and whether it starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sglang_startup: Option<crate::estimate::SglangStartup>,
    /// llama.cpp's own refusal to start (`verdict::llama_refusal`): what it logs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llama_refuses: Option<&'static str>,
    /// With `--python`: the model as transformers built it on the meta device (its version, the
    /// class, parameters by role and dtype), the source of this plan's parameters and cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub derived: Option<Derived>,
    /// With `--lora-rank` or `--draft-model`: what runs beside the model, as planned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deployment: Option<DeploymentFacts>,
    /// With `--images`: the images' tokens and the encoder's input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images: Option<ImagesFacts>,
    pub notes: Vec<String>,
}

/// The images each prompt carries (`plan --images`), as the model's processor turns them into
/// tokens.
#[derive(Debug, Clone, Serialize)]
pub struct ImagesFacts {
    /// Images per request.
    pub images: u64,
    pub model_type: &'static str,
    /// One image's size after the processor resizes it.
    pub height: u64,
    pub width: u64,
    pub tokens_per_image: u64,
    /// What the images add to each prompt (`workload.prompt_tokens` includes it).
    pub prompt_tokens_added: u64,
    /// The positions the vision encoder attends over, per image.
    pub encoder_positions_per_image: u64,
}

/// The adapters and the draft model a plan priced.
#[derive(Debug, Clone, Serialize)]
pub struct DeploymentFacts {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora: Option<crate::estimate::deployment::Lora>,
    /// The LoRA parameters of one adapter over the modules the engine wraps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora_parameters_per_adapter: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draft_model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draft_parameters: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_speculative_tokens: Option<u64>,
}

impl DeploymentFacts {
    fn of(spec: &crate::model::Spec, engine: Engine, d: &Deployment) -> Option<DeploymentFacts> {
        use crate::estimate::deployment::{adapter_parameters, wrapped};
        (!d.is_empty()).then(|| DeploymentFacts {
            lora: d.lora,
            lora_parameters_per_adapter: d
                .lora
                .as_ref()
                .map(|l| adapter_parameters(spec, l.rank, wrapped(l, engine))),
            draft_model: d.draft.as_ref().map(|x| x.spec.name.clone()),
            draft_parameters: d.draft.as_ref().map(|x| x.spec.parameters()),
            num_speculative_tokens: d.draft.as_ref().map(|x| x.tokens),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WeightsFrom {
    SafetensorsHeaders,
    Gguf,
    Config,
    /// The tensors transformers built on the meta device (`--python`).
    TransformersMeta,
}

impl WeightsFrom {
    fn of(
        spec: &crate::model::Spec,
        dtype: crate::dtype::WeightDtype,
        derived: bool,
    ) -> WeightsFrom {
        let native = dtype == spec.native_dtype;
        if spec.gguf.is_some() && native {
            WeightsFrom::Gguf
        } else if spec.checkpoint.is_some() && native {
            WeightsFrom::SafetensorsHeaders
        } else if derived {
            WeightsFrom::TransformersMeta
        } else {
            WeightsFrom::Config
        }
    }
}

pub fn plan(req: &PlanRequest) -> Result<PlanReport> {
    req.check()?;
    check_sglang(req)?;
    if req.parallel.is_set() && !matches!(req.engine, Engine::Vllm | Engine::Sglang) {
        return Err(InputError::Usage(format!(
            "--tensor-parallel-size, --pipeline-parallel-size, --nodes and --gpus-per-node plan \
             vLLM's workers; add --engine vllm (this plan is for {})",
            req.engine
        ))
        .into());
    }
    req.vllm.check()?;
    if let Some(flag) = req
        .vllm
        .first_given()
        .filter(|_| req.engine != Engine::Vllm)
    {
        return Err(InputError::Usage(match (req.engine, sglang_twin(flag)) {
            (Engine::Sglang, Some(twin)) => {
                format!("{flag} is a vLLM flag; SGLang's is {twin} (or add --engine vllm)")
            }
            _ => format!(
                "{flag} is a vLLM flag; add --engine vllm (this plan is for {})",
                req.engine
            ),
        })
        .into());
    }
    if let Some(t) = crate::model::ollama_tags::find(&req.model)
        .filter(|_| req.ollama.is_none() && !std::path::Path::new(&req.model).exists())
    {
        return Err(InputError::Usage(format!(
            "{} is an ollama tag ({} in {}); add --engine ollama, or give -m {} for {}",
            req.model, t.tag.model, t.quant, t.tag.model, req.engine
        ))
        .into());
    }
    let tag = req
        .ollama
        .and_then(|_| crate::model::ollama_tags::find(&req.model))
        .filter(|_| !std::path::Path::new(&req.model).exists());
    let model = tag.map_or(req.model.as_str(), |t| t.tag.model);
    check_deployment(req)?;
    if req.llama_server.is_some() && (req.engine != Engine::LlamaCpp || req.ollama.is_some()) {
        return Err(InputError::Usage(format!(
            "-c 0, --fit, --fit-target, --fit-ctx and --kv-unified are llama-server's; add \
             --engine llama.cpp or give a .gguf (this plan is for {})",
            if req.ollama.is_some() {
                "ollama, which sets -c and -ngl itself".to_string()
            } else {
                req.engine.to_string()
            }
        ))
        .into());
    }
    let (ResolvedModel { spec, source }, derived) = resolve_model(req, model)?;
    let (spec, mmproj_note) = attach_mmproj(req, spec)?;
    let draft = match req.deployment.draft_model.as_deref() {
        Some(m) => Some(
            resolve(m)
                .map_err(|e| InputError::Usage(format!("--draft-model {m}: {e}")))?
                .spec,
        ),
        None if req.deployment.mtp => Some(spec.mtp_draft().ok_or_else(|| {
            InputError::Usage(format!(
                "--mtp: {} has no multi-token-prediction layers llm-oom sizes (DeepSeek-V2/V3's \
                 num_nextn_predict_layers, Qwen3.5's mtp_num_hidden_layers); give --draft-model \
                 for a separate draft",
                spec.name
            ))
        })?),
        None => None,
    };
    // vLLM runs the MTP layers in turn: a K past their number must be a multiple of it
    // (vllm/config/speculative.py: "must be divisible by n_predict").
    if let (true, Engine::Vllm, Some(d), Some(k)) = (
        req.deployment.mtp,
        req.engine,
        draft.as_ref(),
        req.deployment.speculative_tokens,
    ) {
        let n = d.num_layers.max(1);
        if k > n && k % n != 0 {
            return Err(InputError::Usage(format!(
                "--num-speculative-tokens {k}: vLLM reuses the {n} MTP layers in turn and needs \
                 at most {n} tokens or a multiple of {n}"
            ))
            .into());
        }
    }
    // SGLang gives a mixture of experts' gate/up/down LoRA per-expert buffers
    // (lora/mem_pool.py `init_buffers`: `gate_up_proj_moe`, `down_proj_moe`), not priced here.
    if let (Engine::Sglang, Some(l), Some(e)) = (
        req.engine,
        req.deployment.lora.as_ref(),
        spec.experts.as_ref().filter(|e| e.sparse_layers > 0),
    ) {
        use crate::estimate::deployment::Target;
        if [Target::Gate, Target::Up, Target::Down]
            .into_iter()
            .any(|t| l.targets.contains(t))
        {
            return Err(InputError::Usage(format!(
                "--lora-targets: SGLang allocates LoRA buffers for gate, up and down of each of \
                 the {} routed experts in every layer (lora/mem_pool.py: gate_up_proj_moe, \
                 down_proj_moe, max_loras × experts × rank × dims), which llm-oom does not price; \
                 give attention targets (q,k,v,o)",
                e.count
            ))
            .into());
        }
    }
    let mut notes = spec.notes.clone();
    notes.extend(mmproj_note);
    let mut w = req.workload(&spec);
    // vLLM's --kv-cache-dtype sets the KV dtype; --kv-dtype beside it must say the same.
    if let Some(k) = req.vllm.kv_cache_dtype {
        let kv = k.kv_dtype(w.weight_dtype);
        if let Some(given) = req.kv_dtype.filter(|&g| g != kv) {
            return Err(InputError::Usage(format!(
                "--kv-cache-dtype {k} keeps the KV cache in {kv} but --kv-dtype says {given}; give one of them"
            ))
            .into());
        }
        w.kv_dtype = kv;
    }
    let images = image_load(req, &spec, &mut w, &mut notes)?;
    notes.extend(past_context(&spec, &w));
    if spec.gguf.is_some() && !matches!(req.engine, Engine::LlamaCpp | Engine::Candle) {
        notes.push(format!(
            "a GGUF file runs in llama.cpp; planning with the {} profile as asked",
            req.engine
        ));
    }
    notes.extend(req.vram_read.clone());
    let device = card::choose(req.vram, req.gpu_index, &mut notes);
    let mut ollama = req
        .ollama
        .map(|o| ollama_launch(req, &o, tag, &spec, &mut w, device.vram_bytes, &mut notes));
    let mut llama_server = req.llama_server.as_ref().map(|a| {
        let (fitted, f) = crate::estimate::llamacpp_fit::fit(&spec, &w, device.vram_bytes, a);
        w = fitted;
        notes.push(crate::verdict::llama_server::fit_note(&f));
        f
    });
    let deployment = Deployment {
        lora: req.deployment.lora,
        draft: draft.as_ref().map(|d| Draft {
            spec: d,
            tokens: req.deployment.speculative_tokens.unwrap_or_else(|| {
                if req.deployment.mtp {
                    d.num_layers
                } else {
                    speculative_tokens(req.engine)
                }
            }),
        }),
        images: None,
    };
    // vLLM: what its start-up profile of the encoder takes off the KV cache, priced once on this
    // card and the same for every workload.
    let images = images.map(|mut l| {
        if req.engine == Engine::Vllm {
            let with = Deployment {
                images: Some(l),
                ..deployment
            };
            let s =
                crate::estimate::vllm_startup_with(&spec, &w, device.vram_bytes, &req.vllm, &with);
            l.vllm_reserve = Some(s.vision_encoder_bytes);
        }
        l
    });
    let deployment = Deployment {
        images,
        ..deployment
    };
    notes.extend(deployment_notes(&spec, &w, &deployment, req.deployment.mtp));
    let planner = Planner::new(&spec, device.vram_bytes)
        .with_deployment(deployment)
        .with_images(images);
    let planner = if req.exact {
        planner.with_pool()
    } else {
        planner
    };
    let mut f = forecast(&planner, &w);
    if f.replayed {
        notes.push(format!(
            "--exact: the verdict, the peak, the budget and the bf16 what-if are transformers' \
             allocation sequence replayed through PyTorch's caching allocator on a card with {} \
             free for the process (the CUDA context, what kernels take beside the pool and the \
             driver's reserve as measured on the H200); the table of components is the profile's \
             decomposition",
            crate::units::Bytes(device.vram_bytes)
        ));
    } else if req.exact {
        notes.push(
            "--exact: transformers' allocation sequence is known for the llama family (Llama, \
             Mistral, Qwen2/2.5, Qwen3, Phi-3) in 16 bits and for transformers only; the profile \
             answers"
                .to_string(),
        );
    }
    // vLLM on one card: its own start-up check decides (it takes gpu_memory_utilization of the
    // card whatever the workload; more requests than the KV cache holds wait, they do not OOM).
    let vllm_startup = (req.engine == Engine::Vllm
        && req.gpus.len() <= 1
        && !req.parallel.is_set()
        && !f.replayed)
        .then(|| {
            crate::estimate::vllm_startup_with(&spec, &w, device.vram_bytes, &req.vllm, &deployment)
        });
    if let (Some(s), Some(e)) = (
        &vllm_startup,
        vllm_startup.as_ref().and_then(|s| s.encoder_profile),
    ) {
        notes.push(vllm_images_note(s, &e));
    }
    if let Some(s) = &vllm_startup {
        let (v, remedies, said) = crate::verdict::startup::verdict(s, &w);
        f.verdict = v;
        f.remedies = remedies;
        notes.extend(said);
    } else if req.engine == Engine::Vllm
        && (crate::estimate::VllmArgs {
            kv_cache_dtype: None,
            version: None,
            ..req.vllm
        })
        .first_given()
        .is_some()
    {
        notes.push(
            "--gpu-memory-utilization, --max-model-len, --max-num-seqs, \
             --max-num-batched-tokens, --enforce-eager and --cpu-offload-gb are read for one \
             card; this plan over several GPUs uses vLLM's defaults"
                .to_string(),
        );
    }
    if vllm_startup.is_none()
        && req.engine == Engine::Vllm
        && req.vllm.version == Some(crate::estimate::VllmVersion::V0)
    {
        notes.push(
            "--vllm-version v0 is read for one card's start-up check; this plan over several \
             GPUs does not model V0's profiling run"
                .to_string(),
        );
    }
    // SGLang's attention splits its heads over the --tp ranks (QKVParallelLinear).
    let tp = sglang_tp(req);
    if req.engine == Engine::Sglang && spec.num_heads > 0 && spec.num_heads % tp != 0 {
        return Err(InputError::Usage(format!(
            "--tp {tp}: SGLang splits the model's {} attention heads over the ranks and {tp} does \
             not divide them; use a divisor of {}",
            spec.num_heads, spec.num_heads
        ))
        .into());
    }
    // SGLang on one card, or --tp ranks on one node: the token pool of a rank within
    // mem_fraction_static decides whether it starts.
    let sglang_startup = (req.engine == Engine::Sglang && !f.replayed).then(|| {
        crate::estimate::sglang_startup::startup_beside(
            &spec,
            &w,
            device.vram_bytes,
            &req.sglang,
            sglang_tp(req),
            &sglang_beside(&spec, &w, &deployment, req.deployment.mtp),
        )
    });
    if let Some(s) = &sglang_startup {
        let (mut v, remedies, said) = crate::verdict::sglang_startup::verdict(s, &w);
        if s.tp > 1 {
            v.summary.push_str(&format!(
                " · on each of {} GPUs (--tp {}, one rank's share)",
                s.tp, s.tp
            ));
        }
        f.verdict = v;
        f.remedies = remedies;
        notes.extend(said);
    }
    crate::verdict::llama_server::speak(&planner, &w, &f.estimate, &mut f.verdict, &mut f.remedies);
    let oom = f.verdict.cause != crate::verdict::Cause::None;
    let host_ram = req
        .host_ram
        .or_else(|| crate::meter::host::host_memory().map(|(_, available)| available));
    let at = Where {
        card: device.vram_bytes,
        host_ram,
    };
    let placement = place(req, &spec, &w, &f.estimate, oom, at, &mut notes)?;
    let gpus = placement.as_ref().map_or(0, |p| {
        p.devices
            .iter()
            .filter(|s| matches!(s.device, Place::Gpu(_)))
            .count()
    });
    if placement.is_none() && req.gpus.len() > 1 && req.engine != Engine::Sglang {
        notes.push(format!(
            "{} GPUs asked: how {} spreads a model over several GPUs is not modelled yet \
             (docs/multi-gpu.md); this plan is for one {} card",
            req.gpus.len(),
            req.engine,
            crate::units::Bytes(device.vram_bytes)
        ));
    }
    if let Some((o, p)) = ollama
        .as_mut()
        .filter(|o| o.num_gpu.is_some() && req.gpus.len() <= 1)
        .zip(placement.as_ref())
    {
        crate::verdict::llama_server::ollama_num_gpu(
            o.quant,
            o.num_gpu.unwrap_or_default(),
            p,
            &mut f.verdict,
            &mut f.remedies,
        );
        o.layers_on_gpu = p.runs_out.is_none().then_some(p.layers_on_gpus);
    } else if let Some(o) = ollama.as_mut() {
        let fix = placement.as_ref().and_then(|p| p.fix.as_ref());
        crate::verdict::llama_server::ollama(
            o.quant,
            fix.filter(|_| oom && gpus <= 1),
            spec.num_layers,
            &mut f.verdict,
            &mut f.remedies,
        );
        o.layers_on_gpu = if oom {
            fix.map(|x| x.layers_on_gpus)
        } else {
            Some(spec.num_layers)
        };
    }
    if let Some(s) = llama_server.as_mut() {
        let fix = placement.as_ref().and_then(|p| p.fix.as_ref());
        crate::verdict::llama_server::fitted(
            s,
            fix.filter(|_| gpus <= 1),
            spec.num_layers,
            &f.estimate,
            &mut f.verdict,
            &mut f.remedies,
        );
    }
    let oom = f.verdict.cause != crate::verdict::Cause::None;
    let mut across_gpus = Vec::new();
    if let Some(p) = placement.as_ref().filter(|_| gpus > 1) {
        // Several GPUs: the placement decides, and the one-card remedies do not apply.
        notes.push(format!(
            "{gpus} GPUs: the safe token budget and quantization what-if (in --json) are for one {} \
             card; the verdict is the placement's",
            crate::units::Bytes(device.vram_bytes)
        ));
        f.verdict = from_placement(p);
        f.remedies.clear();
    } else if oom && !req.deployment.is_empty() {
        notes.push(
            "with adapters or a draft model, spreading over more GPUs is not priced: the \
             placement per device is the model's alone"
                .to_string(),
        );
    } else if oom {
        if let Some(fix) = placement
            .as_ref()
            .filter(|_| req.engine == Engine::LlamaCpp)
            .and_then(|p| p.fix.as_ref())
            .filter(|fix| fix.layers_on_gpus > 0)
        {
            let r = crate::verdict::llama_server::offload(
                fix,
                spec.num_layers,
                &f.estimate,
                device.vram_bytes,
            );
            let at = f
                .remedies
                .iter()
                .position(|r| {
                    !r.fits() || matches!(r.change, crate::verdict::remedy::Change::LargerGpu(_))
                })
                .unwrap_or(f.remedies.len());
            f.remedies.insert(at, r);
        }
        across_gpus =
            crate::verdict::split::across_gpus(&spec, &w, device.vram_bytes, host_ram, &f.estimate);
    }
    // Past the trained context is a finding of the verdict (memory may fit; the output will not
    // be what the model was trained for), not only a note at the bottom.
    if let Some(why) = past_context(&spec, &w) {
        f.verdict.summary = format!(
            "{} · but prompt + new tokens ({}) is past the model's {}-token context",
            f.verdict.summary,
            crate::units::group(w.total_tokens()),
            crate::units::group(spec.max_position_embeddings.unwrap_or(0))
        );
        f.verdict.evidence.insert(
            0,
            crate::verdict::Evidence::text(format!("past the context: {why}")),
        );
    }
    // ollama's automatic num_ctx that does not load, even in part: it retries with the next
    // lower one (`nextLowerAutoNumCtx`).
    if let Some(lower) = ollama
        .as_ref()
        .filter(|o| o.num_ctx_auto && f.verdict.cause != crate::verdict::Cause::None)
        .and_then(|o| crate::estimate::ollama::next_lower_num_ctx(o.num_ctx))
    {
        let retry = PlanRequest {
            ollama: req.ollama.map(|o| crate::estimate::ollama::OllamaArgs {
                num_ctx: Some(lower),
                ..o
            }),
            ..req.clone()
        };
        let mut r = plan(&retry)?;
        if let Some(o) = r.ollama.as_mut() {
            o.num_ctx_auto = true;
        }
        r.notes.push(format!(
            "ollama's automatic num_ctx {} does not load on this card; it retries with {}",
            crate::units::group(ollama.as_ref().map_or(0, |o| o.num_ctx)),
            crate::units::group(lower)
        ));
        return Ok(r);
    }
    // llama.cpp refuses a quantized V cache with flash attention off, whatever the memory.
    let llama_refuses = crate::verdict::llama_refusal::refuses(&w)
        .then_some(crate::verdict::llama_refusal::MESSAGE);
    if llama_refuses.is_some() {
        let (v, remedies) =
            crate::verdict::llama_refusal::verdict(&planner, &w, &f.estimate, ollama.is_some());
        f.verdict = v;
        f.remedies = remedies;
        across_gpus.clear();
    }
    // V0's refusal of the flags: more GPUs do not change them.
    if vllm_startup
        .as_ref()
        .is_some_and(|s| s.config_error.is_some())
    {
        across_gpus.clear();
    }
    if req.engine == Engine::Vllm
        && req.vllm.enable_chunked_prefill.is_some()
        && req.vllm.version != Some(crate::estimate::VllmVersion::V0)
    {
        notes.push(
            "--enable-chunked-prefill / --no-enable-chunked-prefill are read for vLLM V0 \
             (--vllm-version v0); V1 is planned with chunked prefill on"
                .to_string(),
        );
    }
    let mut budget = planner.budget(&w);
    let mut quantization = planner.quantization_what_if(&w);
    pool_budget(
        req,
        &spec,
        &w,
        device.vram_bytes,
        &deployment,
        (vllm_startup.as_ref(), sglang_startup.as_ref()),
        (&mut budget, &mut quantization),
    );
    notes.extend(crate::budget::long_lived::note(
        w.engine,
        budget.max_prompt_tokens,
    ));
    notes.extend(crate::estimate::ssd_scan_note(&spec, w.engine));
    notes.extend(card::constants_note(
        w.engine,
        req.vram_card.as_deref(),
        device.gpu.as_ref(),
    ));
    notes.extend(crate::budget::unified::note_for(
        req.vram_card.as_deref(),
        w.engine,
    ));
    let profile = Profile::of(req.engine);
    Ok(PlanReport {
        command: "plan",
        version: env!("CARGO_PKG_VERSION"),
        verdict: f.verdict,
        remedies: f.remedies,
        model: facts(&spec, source),
        workload: w,
        device,
        engine: EngineFacts {
            name: req.engine,
            calibration: profile.calibration,
            note: profile.calibration_note(),
            server: ollama.as_ref().map(|_| "ollama"),
        },
        // The model's bytes (a GGUF's tensor table) as the engine lays them out (vLLM pads MXFP4
        // experts); the estimate's `weights` is what of them sits on the GPU (llama.cpp keeps the
        // input embedding in host memory).
        weights_bytes: crate::estimate::engine_weight_bytes(&spec, w.weight_dtype, req.engine),
        weights_from: WeightsFrom::of(&spec, w.weight_dtype, derived.is_some()),
        kv_cache_bytes_per_token: kv_bytes_per_token_at(
            &spec,
            w.kv_dtype,
            CachePolicy::of(req.engine),
            0,
        ),
        kv_cache_bytes: f.estimate.kv_cache_full,
        budget,
        quantization,
        components: f.estimate,
        placement,
        across_gpus,
        vllm_startup,
        sglang_startup,
        llama_refuses,
        ollama,
        llama_server,
        derived,
        deployment: DeploymentFacts::of(&spec, req.engine, &deployment),
        images: images.filter(|l| l.per_request > 0).map(|l| ImagesFacts {
            images: l.per_request,
            model_type: l.input.model_type,
            height: l.cost.height,
            width: l.cost.width,
            tokens_per_image: l.cost.tokens,
            prompt_tokens_added: l.tokens(),
            encoder_positions_per_image: l.cost.encoder_positions,
        }),
        notes,
    })
}

/// `plan --images`: the prompt grows by the images' tokens (the model's processor rule), and the
/// planner prices the vision encoder's activations. One line and exit 2 for a text-only model, a
/// family whose rule is not known, or an engine not modelled (ollama, SGLang, candle).
fn image_load(
    req: &PlanRequest,
    spec: &crate::model::Spec,
    w: &mut Workload,
    notes: &mut Vec<String>,
) -> Result<Option<crate::model::images::ImageLoad>> {
    let n = req.deployment.images;
    if req.deployment.limit_mm_per_prompt.is_some() && req.engine != Engine::Vllm {
        return Err(InputError::Usage(
            "--limit-mm-per-prompt is a vLLM flag; add --engine vllm or leave it out".into(),
        )
        .into());
    }
    if n == 0 {
        if let Some(load) = llamacpp_mmproj_warmup(req, spec, notes) {
            return Ok(Some(load));
        }
        return Ok(vllm_default_profile(req, spec, notes));
    }
    let Some(input) = spec.images else {
        let why = if spec.vision.is_empty() && !spec.notes.iter().any(|s| s.contains("vision")) {
            "is a text-only model".to_string()
        } else {
            format!(
                "is multimodal, but its image rule is not known ({})",
                crate::model::images::KNOWN_FAMILIES
            )
        };
        return Err(InputError::Usage(format!(
            "--images: {} {why}; leave --images out",
            spec.name
        ))
        .into());
    };
    let limit = req
        .deployment
        .limit_mm_per_prompt
        .unwrap_or(crate::model::images::VLLM_DEFAULT_LIMIT);
    match req.engine {
        e if e.is_transformers() => {}
        Engine::Vllm => {
            if req.vllm.version == Some(crate::estimate::VllmVersion::V0) {
                return Err(InputError::Usage(
                    "--images with vLLM follows V1's encoder profile; leave --vllm-version v0 out"
                        .into(),
                )
                .into());
            }
            if req.gpus.len() > 1 || req.parallel.is_set() {
                return Err(InputError::Usage(
                    "--images with vLLM is planned on one card (its start-up profile of the \
                     encoder); leave the GPUs or the parallel layout out"
                        .into(),
                )
                .into());
            }
            // vllm/multimodal/processing: a prompt past the limit is refused.
            if n > limit {
                return Err(InputError::Usage(format!(
                    "--images {n}: vLLM takes at most {limit} image(s) in one prompt \
                     (--limit-mm-per-prompt); raise it or send fewer"
                ))
                .into());
            }
        }
        // ollama runs Gemma-3's and Qwen2.5-VL's towers on its own engine (model/models/*), not
        // llama.cpp's mtmd: not modelled.
        Engine::LlamaCpp if req.ollama.is_none() => {}
        _ => {
            return Err(InputError::Usage(format!(
                "--images is planned for transformers, vLLM and llama.cpp; {} is not modelled: \
                 leave --images out or add --engine vllm",
                if req.ollama.is_some() {
                    "ollama".to_string()
                } else {
                    req.engine.to_string()
                }
            ))
            .into());
        }
    }
    if req.exact {
        return Err(InputError::Usage(
            "--images is not in --exact's replayed sequence; leave one of them out".into(),
        )
        .into());
    }
    if req.engine == Engine::LlamaCpp
        && !matches!(
            input.rule,
            crate::model::images::TokenRule::Fixed { .. }
                | crate::model::images::TokenRule::Dynamic { .. }
        )
    {
        return Err(InputError::Usage(format!(
            "--images with llama.cpp is planned for Gemma-3, Qwen-VL and LLaVA (their mtmd \
             encoders); {}'s is not modelled: leave --images out or add --engine vllm",
            input.model_type
        ))
        .into());
    }
    let input = if req.engine == Engine::LlamaCpp {
        input.for_llamacpp()
    } else {
        input
    };
    let cost = input.cost(req.deployment.image_size);
    if req.engine == Engine::LlamaCpp {
        llamacpp_images_check(req, &input, &cost)?;
    }
    let load = crate::model::images::ImageLoad {
        input,
        cost,
        per_request: n,
        limit_mm_per_prompt: limit,
        vllm_reserve: None,
    };
    let text = w.prompt_tokens;
    w.prompt_tokens = text.saturating_add(load.tokens());
    crate::limits::flag("--images", w.prompt_tokens)?;
    let size = match (input.rule, req.deployment.image_size) {
        (crate::model::images::TokenRule::Dynamic { .. }, None) => {
            "the largest the processor keeps, ".to_string()
        }
        (crate::model::images::TokenRule::Fixed { .. }, Some(_)) => {
            "resized by the processor to ".to_string()
        }
        (crate::model::images::TokenRule::AnyRes { .. }, _) => {
            "fit into a crop grid of ".to_string()
        }
        (
            crate::model::images::TokenRule::Tiles {
                canvas: crate::model::images::Canvas::Phi3V,
                ..
            },
            _,
        ) => "scaled and padded by the HD transform to ".to_string(),
        _ => String::new(),
    };
    notes.push(format!(
        "--images {n}: each image is {size}{}x{} px, {} tokens ({}); the prompt is {} text + {} \
         image tokens = {} tokens",
        cost.width,
        cost.height,
        crate::units::group(cost.tokens),
        input.rule.describe(),
        crate::units::group(text),
        crate::units::group(load.tokens()),
        crate::units::group(w.prompt_tokens)
    ));
    if req.engine == Engine::LlamaCpp {
        notes.push(llamacpp_images_note(req, &load));
    }
    Ok(Some(load))
}

/// llama.cpp's `--mmproj FILE` (`model::mmproj`): the projector file's weights become the vision
/// tower and its projector type the image rule, so `--images` works for a GGUF model too. Refused
/// (one line) for the other engines: only llama.cpp's mtmd reads an mmproj.
fn attach_mmproj(
    req: &PlanRequest,
    mut spec: crate::model::Spec,
) -> Result<(crate::model::Spec, Option<String>)> {
    let Some(path) = req.deployment.mmproj.as_deref() else {
        return Ok((spec, None));
    };
    if req.engine != Engine::LlamaCpp || req.ollama.is_some() {
        return Err(InputError::Usage(format!(
            "--mmproj is llama.cpp's multimodal projector; add --engine llama.cpp or leave it \
             out (this plan is for {})",
            if req.ollama.is_some() {
                "ollama".to_string()
            } else {
                req.engine.to_string()
            }
        ))
        .into());
    }
    let m = crate::model::mmproj::read_mmproj(path)?;
    spec.images = Some(m.input);
    spec.mmproj_bytes = Some(m.total_bytes);
    let note = format!(
        "--mmproj {}: a {} projector over a ViT of {} blocks, {} wide; its {} tensors ({} \
         parameters, {}) are the vision tower row, on the GPU unless --no-mmproj-offload",
        path.display(),
        m.projector,
        m.blocks,
        crate::units::group(m.input.hidden),
        crate::units::group(m.tensor_count),
        crate::units::group(m.parameters),
        crate::units::Bytes(m.total_bytes),
    );
    Ok((spec, Some(note)))
}

/// `--mmproj` without `--images`: llama.cpp loads the projector and warms its CLIP graph up at
/// start (tools/mtmd/clip.cpp `warmup`, reserving the compute buffer for the warm-up image), so
/// the vision encoder row holds that buffer though no image is sent.
fn llamacpp_mmproj_warmup(
    req: &PlanRequest,
    spec: &crate::model::Spec,
    notes: &mut Vec<String>,
) -> Option<crate::model::images::ImageLoad> {
    let input = spec.images.filter(|_| {
        req.engine == Engine::LlamaCpp && req.ollama.is_none() && req.deployment.mmproj.is_some()
    })?;
    let load = crate::model::images::ImageLoad {
        input,
        cost: input.llamacpp_warmup(),
        per_request: 0,
        limit_mm_per_prompt: crate::model::images::VLLM_DEFAULT_LIMIT,
        vllm_reserve: None,
    };
    let fa = req.llama.flash_attn.unwrap_or(true);
    notes.push(format!(
        "--mmproj without --images: llama.cpp still loads the projector and warms up its CLIP \
         compute buffer at start ({} for the {}x{} warm-up image with flash attention {}), so the \
         vision tower and vision encoder rows are counted; --images N adds the images' tokens \
         to the prompt",
        crate::units::Bytes(load.llamacpp_clip_bytes(fa)),
        load.cost.width,
        load.cost.height,
        if fa { "on" } else { "off" },
    ));
    Some(load)
}

/// A vision-language model in vLLM without `--images`: V1's start-up still encodes the largest
/// dummy images its encoder budget holds and keeps them through the language model's profile
/// (`gpu_model_runner.profile_run` runs whenever the model is multimodal and a modality's
/// `--limit-mm-per-prompt` is above 0), so what that takes off the KV cache is planned as with
/// `--images`, with no image tokens in the prompt. `--limit-mm-per-prompt 0` turns it off.
fn vllm_default_profile(
    req: &PlanRequest,
    spec: &crate::model::Spec,
    notes: &mut Vec<String>,
) -> Option<crate::model::images::ImageLoad> {
    let input = spec.images.filter(|_| req.engine == Engine::Vllm)?;
    let limit = req
        .deployment
        .limit_mm_per_prompt
        .unwrap_or(crate::model::images::VLLM_DEFAULT_LIMIT);
    if limit == 0 {
        notes.push(
            "--limit-mm-per-prompt 0: vLLM takes no images and skips its start-up profile of \
             the vision encoder (the tower's weights are still counted)"
                .into(),
        );
        return None;
    }
    if req.vllm.version == Some(crate::estimate::VllmVersion::V0)
        || req.gpus.len() > 1
        || req.parallel.is_set()
        || req.exact
    {
        notes.push(
            "vLLM also profiles the vision encoder at start-up; that profile is planned for V1 on \
             one card and is not in this plan (--limit-mm-per-prompt 0 turns it off)"
                .into(),
        );
        return None;
    }
    Some(crate::model::images::ImageLoad {
        input,
        cost: input.cost(req.deployment.image_size),
        per_request: 0,
        limit_mm_per_prompt: limit,
        vllm_reserve: None,
    })
}

/// llama.cpp decodes Gemma-3's image embeddings with non-causal attention
/// (tools/mtmd/mtmd.cpp, `mtmd_decode_use_non_causal`), and `llama_decode` then needs the
/// image's tokens in one ubatch (src/llama-context.cpp: "non-causal attention requires n_ubatch
/// >= n_tokens"); mtmd-helper hands them over `-b` at a time.
fn llamacpp_images_check(
    req: &PlanRequest,
    input: &crate::model::images::ImageInput,
    cost: &crate::model::images::ImageCost,
) -> Result<()> {
    use crate::estimate::llamacpp::{DEFAULT_BATCH, DEFAULT_UBATCH};
    if input.model_type != "gemma3" {
        return Ok(());
    }
    let llama = &req.llama;
    let batch = llama.batch.unwrap_or(DEFAULT_BATCH);
    let ubatch = llama.ubatch.unwrap_or(DEFAULT_UBATCH).min(batch);
    if ubatch < cost.tokens {
        return Err(InputError::Usage(format!(
            "--images with llama.cpp: Gemma-3 decodes an image's {} tokens with non-causal \
             attention in one ubatch, and -ub/-b is {ubatch}; raise -ub and -b to {} or more",
            cost.tokens, cost.tokens
        ))
        .into());
    }
    Ok(())
}

/// llama.cpp's vision encoder, in words: what the `vision encoder` row is and where it comes from.
fn llamacpp_images_note(req: &PlanRequest, load: &crate::model::images::ImageLoad) -> String {
    let warmup = load.input.llamacpp_warmup();
    let fa = req.llama.flash_attn.unwrap_or(true);
    let bytes = load.llamacpp_clip_bytes(fa);
    let (h, w) = if load.cost.encoder_positions > warmup.encoder_positions {
        (load.cost.height, load.cost.width)
    } else {
        (warmup.height, warmup.width)
    };
    format!(
        "llama.cpp: the vision encoder row is the CLIP compute buffer (tools/mtmd/clip.cpp, \
         `alloc_compute_meta`), {} for one {w}x{h} image with flash attention {}: reserved at \
         load for the warm-up image ({}x{}), grown for a larger one, and reused for every image, \
         which are encoded one at a time; the mmproj weights are the vision tower row ({}, on \
         the GPU unless --no-mmproj-offload), and -c holds the images' tokens",
        crate::units::Bytes(bytes),
        if fa { "on" } else { "off" },
        warmup.width,
        warmup.height,
        if req.deployment.mmproj.is_some() {
            "the --mmproj file's tensors as stored"
        } else {
            "f16"
        },
    )
}

/// vLLM's start-up profile of the vision encoder, in words: the images it encodes, what the tower
/// and the encoder cache hold, and what that takes off the KV cache.
fn vllm_images_note(
    s: &crate::estimate::VllmStartup,
    e: &crate::model::images::VllmEncoderProfile,
) -> String {
    use crate::units::{group, Bytes};
    format!(
        "vLLM profiles the vision encoder at start-up, whatever --images: {} image(s) of {} \
         tokens (the largest its processor keeps; the encoder budget is {} tokens, \
         max(--max-num-batched-tokens {}, one image)); the tower's {} and the encoder cache's {} \
         beside the language model's profile take {} off the KV cache; the images' tokens count \
         toward --max-model-len {}",
        group(e.items),
        group(e.tokens_per_item),
        group(e.encoder_budget),
        group(s.max_num_batched_tokens),
        Bytes(e.encoder_bytes),
        Bytes(e.cache_bytes),
        Bytes(s.vision_encoder_bytes),
        group(s.max_model_len),
    )
}

/// The model as `--model` names it; with `--python`, also as transformers builds it on the meta
/// device: the source of parameters and cache where no hand-written family claims the
/// architecture, and the check of the family's counts where one does.
fn resolve_model(req: &PlanRequest, model: &str) -> Result<(ResolvedModel, Option<Derived>)> {
    let Some(python) = req.python.as_deref() else {
        return Ok((resolve(model)?, None));
    };
    match resolve(model) {
        Ok(mut r) => {
            if r.spec.gguf.is_some() {
                r.spec.notes.push(
                    "--python: a GGUF file is sized from its own tensor table; transformers was \
                     not asked"
                        .to_string(),
                );
                return Ok((r, None));
            }
            let built = match (&r.source.path, presets::find(model)) {
                (Some(path), _) => derive(python, path, TIMEOUT),
                (None, Some((_, json))) => derive_text(python, json, TIMEOUT),
                (None, None) => return Ok((r, None)),
            };
            match built {
                Ok(d) => {
                    let said = adopt(&mut r.spec, &d);
                    r.spec.notes.push(said);
                    Ok((r, Some(d)))
                }
                Err(DeriveError::Refused { message, .. }) => {
                    r.spec.notes.push(format!(
                        "--python: {message}; parameters and cache are llm-oom's hand-written \
                         family's"
                    ));
                    Ok((r, None))
                }
                Err(e) => Err(e.into()),
            }
        }
        Err(e) if crate::model::guard::unmodelled(&e).is_some() => {
            let path = crate::model::guard::unmodelled(&e)
                .map(std::path::Path::to_path_buf)
                .unwrap_or_default();
            let (mut r, d) = from_transformers(req, python, path, "this model".into())?;
            r.spec.notes.insert(
                0,
                format!("llm-oom's hand-written family refuses this config ({e}); sized as transformers builds it"),
            );
            Ok((r, d))
        }
        Err(InputError::UnknownArchitecture { path, arch, .. }) => {
            let (mut r, d) = from_transformers(req, python, path, arch.clone())?;
            r.spec
                .notes
                .insert(0, format!("`{arch}` has no hand-written family in llm-oom"));
            Ok((r, d))
        }
        Err(e) => Err(e.into()),
    }
}

/// A model no hand-written family sizes, as transformers builds it from `path` on the meta device;
/// the safetensors beside a local config.json still price its weights.
fn from_transformers(
    req: &PlanRequest,
    python: &std::path::Path,
    path: std::path::PathBuf,
    arch: String,
) -> Result<(ResolvedModel, Option<Derived>)> {
    let d = derive(python, &path, TIMEOUT)?;
    let text = std::fs::read_to_string(&path).map_err(|source| InputError::Io {
        path: path.clone(),
        source,
    })?;
    let storage = crate::model::config::storage(&text, &path)?;
    let spec = d.spec(&req.model, storage).ok_or_else(|| {
        InputError::Usage(format!(
            "`{arch}` as transformers builds it has more than 10^15 parameters, the most \
             llm-oom sizes; check {}",
            path.display()
        ))
    })?;
    let mut spec = spec;
    let model = std::path::Path::new(&req.model);
    let kind = if model.is_dir() {
        SourceKind::Directory
    } else if model.is_file() {
        SourceKind::ConfigFile
    } else {
        SourceKind::HfCache
    };
    // The checkpoint's own headers, where its shards lie beside the config, still price
    // the weights exactly.
    if kind != SourceKind::HfCache && path.file_name().is_some_and(|n| n == "config.json") {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            crate::model::source::local_checkpoint(&mut spec, dir)?;
        }
    }
    let source = ModelSource {
        kind,
        path: Some(path),
    };
    Ok((ResolvedModel { spec, source }, Some(d)))
}

/// Hold a hand-written family to what transformers built: where both count the same parameters
/// (the language model's, when the family leaves a vision tower out) and cache the same bytes
/// per token, the family's spec stays and the tower, if any, is added; where they differ, the
/// derived tensors and cache replace it. The note says which, with both numbers.
fn adopt(spec: &mut crate::model::Spec, d: &Derived) -> String {
    use crate::dtype::KvDtype;
    let source = format!("{} ({})", d.source(), d.class);
    let Some(layout) = d.to_layout() else {
        return format!(
            "--python: {source} is past the parameter bound; parameters and cache are llm-oom's \
             hand-written family's"
        );
    };
    let hand_params = spec.parameters();
    let hand_kv = kv_bytes_per_token(spec, KvDtype::Bf16);
    let hand_state = state_bytes(spec, KvDtype::Bf16, CachePolicy::of(Engine::Transformers));
    let mut derived_spec = spec.clone();
    derived_spec.layout = Some(layout.clone());
    derived_spec.vision = Vec::new();
    derived_spec.gguf = None;
    let kv = kv_bytes_per_token(&derived_spec, KvDtype::Bf16);
    let state = state_bytes(
        &derived_spec,
        KvDtype::Bf16,
        CachePolicy::of(Engine::Transformers),
    );
    let vision: Vec<crate::model::TensorGroup> = layout
        .tensors
        .iter()
        .filter(|t| t.role == crate::model::Role::Vision)
        .copied()
        .collect();
    let same_cache = hand_kv == kv && hand_state == state;
    let group = crate::units::group;
    // From here on the plan's weights hold transformers' vision tower, whichever branch is taken.
    if !vision.is_empty() {
        spec.notes
            .retain(|n| n != crate::model::config::VISION_NOT_COUNTED);
    }
    if same_cache && hand_params == d.parameters {
        return format!(
            "parameters and cache: {source}, {} parameters, {} of KV per token in bf16; llm-oom's \
             hand-written family agrees",
            group(d.parameters),
            crate::units::Bytes(kv)
        );
    }
    if same_cache && spec.vision.is_empty() && hand_params == d.text_parameters() {
        let tower = d.parameters.saturating_sub(hand_params);
        spec.vision = vision;
        return format!(
            "parameters and cache: {source}, {} parameters with the vision tower's {} (counted \
             in the weights), {} of KV per token in bf16; llm-oom's hand-written family agrees \
             on the language model",
            group(d.parameters),
            group(tower),
            crate::units::Bytes(kv)
        );
    }
    spec.layout = Some(layout);
    spec.vision = Vec::new();
    format!(
        "parameters and cache: {source}, {} parameters, {} of KV per token and {} of state per \
         sequence in bf16; llm-oom's hand-written family differs ({} parameters, {} of KV per \
         token, {} of state): this plan uses transformers'",
        group(d.parameters),
        crate::units::Bytes(kv),
        crate::units::Bytes(state),
        group(hand_params),
        crate::units::Bytes(hand_kv),
        crate::units::Bytes(hand_state)
    )
}

/// Tokens a draft proposes per step when `--num-speculative-tokens` is not given: transformers'
/// `num_assistant_tokens` (20, `GenerationConfig` in 5.x, schedule "constant"), llama.cpp's
/// `--draft-max` (16, `common_params_speculative::n_max`); vLLM has no default for a draft
/// model (`--speculative-config` must say `num_speculative_tokens`): 5, its documentation's.
pub fn speculative_tokens(engine: Engine) -> u64 {
    match engine {
        Engine::Transformers | Engine::TransformersEager => 20,
        Engine::LlamaCpp => 16,
        _ => 5,
    }
}

/// Adapters and a draft are planned on one card, by engines that load them: refused (exit 2)
/// before any model is read otherwise.
fn check_deployment(req: &PlanRequest) -> Result<()> {
    let d = &req.deployment;
    if d.is_empty() {
        return Ok(());
    }
    let draft = if d.mtp { "--mtp" } else { "--draft-model" };
    let what = match (d.lora.is_some(), d.draft_model.is_some() || d.mtp) {
        (true, true) => format!("--lora-rank and {draft}"),
        (true, false) => "--lora-rank".to_string(),
        _ => draft.to_string(),
    };
    let refuse = |why: String| Err(InputError::Usage(format!("{what}: {why}")).into());
    if req.gpus.len() > 1 || req.parallel.is_set() {
        return refuse(
            "planned on one card; give one --vram (several GPUs and parallel layouts price the \
             model alone)"
                .to_string(),
        );
    }
    if req.exact {
        return refuse(
            "the allocator replay (--exact) traces the model alone; drop --exact".to_string(),
        );
    }
    if req.ollama.is_some() || req.engine == Engine::Candle {
        return refuse(format!(
            "planned for transformers, vLLM, SGLang and llama.cpp; this plan is for {}",
            req.engine
        ));
    }
    // SGLang refuses LoRA beside a neural draft (server_args.py `_handle_lora_settings`).
    if req.engine == Engine::Sglang && d.lora.is_some() && (d.mtp || d.draft_model.is_some()) {
        return refuse(
            "SGLang refuses it at start-up: \"Currently LoRA is only compatible with NGRAM \
             speculative decoding.\" (server_args.py); plan the adapters and the draft apart"
                .to_string(),
        );
    }
    if d.mtp {
        match req.engine {
            Engine::Vllm | Engine::Sglang => {}
            Engine::Transformers | Engine::TransformersEager => {
                return refuse(
                    "transformers does not load the multi-token-prediction layers \
                     (_keys_to_ignore_on_load_unexpected) and cannot draft with them; give \
                     --engine vllm"
                        .to_string(),
                )
            }
            _ => {
                return refuse(format!(
                    "the MTP draft is priced for vLLM (--speculative-config method mtp) and \
                     SGLang (--speculative-algorithm NEXTN); this plan is for {}",
                    req.engine
                ))
            }
        }
    }
    if d.draft_model.is_some() && req.batch > 1 && req.engine.is_transformers() {
        return refuse(format!(
            "transformers' assisted generation runs one sequence (\"assisted generate is only \
             supported for batch_size = 1\"); give --batch 1, or --engine vllm for {} at once",
            req.batch
        ));
    }
    Ok(())
}

/// The LoRA buffers and the draft worker SGLang builds beside the model
/// (`estimate::sglang_startup`): NEXTN for `--mtp`, whose draft loads its own embedding and head
/// (models/deepseek_nextn.py) until `set_embed_and_head` swaps in the target's; STANDALONE for
/// `--draft-model`, a whole model.
fn sglang_beside(
    spec: &crate::model::Spec,
    w: &Workload,
    d: &Deployment,
    mtp: bool,
) -> crate::estimate::sglang_startup::Beside {
    use crate::estimate::deployment::{adapter_bytes, draft_weight_bytes};
    use crate::estimate::sglang_startup::{Beside, DraftWorker, SpecAlgorithm};
    let draft = d.draft.as_ref().map(|x| {
        let weights = draft_weight_bytes(x.spec, w);
        let (algorithm, own_head) = if mtp {
            let elem = w.weight_dtype.compute_kv_dtype().elem_bytes().of(1);
            let rows = if spec.tie_word_embeddings { 1 } else { 2 };
            let head = spec
                .vocab_size
                .saturating_mul(spec.hidden_size)
                .saturating_mul(rows)
                .saturating_mul(elem);
            (SpecAlgorithm::Nextn, head)
        } else {
            (SpecAlgorithm::Standalone, 0)
        };
        DraftWorker {
            algorithm,
            weights_bytes: weights,
            load_bytes: weights.saturating_add(own_head),
            cell_size: crate::estimate::kv_bytes_per_token_at(
                x.spec,
                w.kv_dtype,
                crate::estimate::CachePolicy::of(Engine::Sglang),
                0,
            ),
        }
    });
    Beside {
        lora_bytes: d.lora.as_ref().map_or(0, |l| {
            adapter_bytes(spec, l, Engine::Sglang, w.weight_dtype)
        }),
        draft,
    }
}

/// What the plan of adapters and a draft assumes, said once.
fn deployment_notes(
    spec: &crate::model::Spec,
    w: &Workload,
    d: &Deployment,
    mtp: bool,
) -> Vec<String> {
    use crate::estimate::deployment::{adapter_elem_bytes, adapter_parameters, wrapped, Target};
    let mut notes = Vec::new();
    if let Some(l) = &d.lora {
        let modules = wrapped(l, w.engine);
        let names: Vec<&str> = modules.list().into_iter().map(|t| t.name()).collect();
        let how = match w.engine {
            Engine::Vllm => format!(
                "vLLM (--enable-lora --max-lora-rank {} --max-loras {}) preallocates A and B for \
                 every supported Linear of every layer ({}), whatever the adapter targets, in the \
                 model's dtype",
                l.rank,
                l.max_loras,
                names.join(", ")
            ),
            Engine::Transformers | Engine::TransformersEager => format!(
                "PEFT wraps {} in every layer and keeps the adapter in f32 \
                 (autocast_adapter_dtype=True upcasts bf16 and f16 adapters); {} adapter(s) loaded",
                names.join(", "),
                l.max_loras
            ),
            Engine::Sglang => format!(
                "SGLang (--enable-lora --max-lora-rank {} --max-loras-per-batch {} \
                 --lora-target-modules {}) allocates A and B buffers for {} in every layer and \
                 every slot, in the model's dtype, before it sizes its token pool \
                 (lora/mem_pool.py LoRAMemoryPool.init_buffers; q, k and v share qkv_proj's \
                 buffers, gate and up gate_up_proj's)",
                l.rank,
                l.max_loras,
                l.targets
                    .list()
                    .into_iter()
                    .map(|t| t.name())
                    .collect::<Vec<_>>()
                    .join(" "),
                names.join(", ")
            ),
            _ => format!(
                "llama.cpp's --lora: the adapter's f16 tensors for {}; {} adapter(s)",
                names.join(", "),
                l.max_loras
            ),
        };
        notes.push(format!(
            "LoRA rank {}: {} parameters per adapter (rank × (in + out) per Linear and layer) at \
             {} bytes each; {how}. Training's optimizer state and gradients are not priced: this \
             is inference with adapters",
            l.rank,
            crate::units::group(adapter_parameters(spec, l.rank, modules)),
            adapter_elem_bytes(w.engine, w.weight_dtype)
        ));
        let mlp = [Target::Gate, Target::Up, Target::Down]
            .into_iter()
            .any(|t| modules.contains(t));
        if mlp && spec.experts.as_ref().is_some_and(|e| e.sparse_layers > 0) {
            notes.push(
                "LoRA on a mixture of experts: gate, up and down are priced on the dense layers' \
                 MLP and the shared expert; adapters on the routed experts are not modelled"
                    .to_string(),
            );
        }
    }
    if let (Some(x), true, Engine::Sglang) = (&d.draft, mtp, w.engine) {
        notes.push(format!(
            "--mtp: SGLang --speculative-algorithm NEXTN (--speculative-num-draft-tokens {}) \
             runs the checkpoint's {} multi-token-prediction layer(s) as the draft, {} parameters \
             in the model's dtype (models/deepseek_nextn.py; the embedding and head are the \
             model's once set_embed_and_head has run), with its own KV pool of as many tokens as \
             the model's",
            x.tokens,
            x.spec.num_layers,
            crate::units::group(x.spec.parameters())
        ));
        return notes;
    }
    if let (Some(x), true) = (&d.draft, mtp) {
        notes.push(format!(
            "--mtp: vLLM --speculative-config '{{\"method\": \"mtp\", \"num_speculative_tokens\": \
             {}}}' loads the checkpoint's {} multi-token-prediction layer(s), {} parameters in \
             the model's dtype (the embedding and head are the model's, shared by the proposer), \
             and their KV in the same blocks as the model's",
            x.tokens,
            x.spec.num_layers,
            crate::units::group(x.spec.parameters())
        ));
        return notes;
    }
    if let Some(x) = &d.draft {
        let how = match w.engine {
            Engine::Vllm => format!(
                "vLLM --speculative-config '{{\"model\": \"{}\", \"num_speculative_tokens\": {}}}': \
                 the draft's weights beside the target's and its layers' KV in the same blocks \
                 (each block holds both); the verification tokens stay within \
                 max_num_batched_tokens, the profiling run's size",
                x.spec.name, x.tokens
            ),
            Engine::Sglang => format!(
                "SGLang --speculative-algorithm STANDALONE --speculative-draft-model-path {} \
                 --speculative-num-draft-tokens {}: the draft's weights and its own KV pool of as \
                 many tokens as the model's, both allocated after the model's pool, from what \
                 mem_fraction_static leaves (an EAGLE or EAGLE3 head, which shares the model's \
                 embedding, is priced here as a whole model)",
                x.spec.name, x.tokens
            ),
            Engine::LlamaCpp => format!(
                "llama.cpp -md {} --draft-max {} with the draft on the same GPU: its weights, its \
                 KV buffer for the same context and its own compute buffer",
                x.spec.name, x.tokens
            ),
            _ => format!(
                "transformers' generate(assistant_model=…, num_assistant_tokens={}): the \
                 assistant's weights and its own DynamicCache for the same tokens; at the decode \
                 peak the target runs the {} candidate tokens at once (their activations and f32 \
                 logits); it runs one sequence, so the budget's rows past concurrency 1 do not \
                 apply",
                x.tokens, x.tokens
            ),
        };
        notes.push(format!("draft model {}: {how}", x.spec.name));
        if x.spec.vocab_size != spec.vocab_size {
            notes.push(format!(
                "the draft's embedding has {} rows, the target's {}: vLLM, SGLang and llama.cpp need the \
                 draft to share the target's tokenizer (embeddings padded to other sizes, as \
                 Qwen2.5's are, are fine); transformers' universal assisted decoding takes \
                 another tokenizer, its re-tokenizing is not priced",
                crate::units::group(x.spec.vocab_size),
                crate::units::group(spec.vocab_size)
            ));
        }
    }
    notes
}

/// The one card of the plan and the host RAM offered (the offload tier).
#[derive(Clone, Copy)]
struct Where {
    card: u64,
    host_ram: Option<u64>,
}

/// The placement over the GPUs asked and the host RAM, with several GPUs or one card the workload
/// does not fit (the offload answer): transformers' `device_map="auto"`, llama.cpp's layer split,
/// vLLM's tensor/pipeline ranks (with several GPUs or a parallel layout asked).
fn place(
    req: &PlanRequest,
    spec: &crate::model::Spec,
    w: &Workload,
    e: &Estimate,
    oom: bool,
    at: Where,
    notes: &mut Vec<String>,
) -> Result<Option<Placement>> {
    if req.engine == Engine::Vllm && (req.gpus.len() > 1 || req.parallel.is_set()) {
        let (par, gpus, said) = vllm::resolve(&req.parallel, &req.gpus, at.card)?;
        vllm::check(spec, &par)?;
        notes.extend(said);
        let mut p = vllm::plan_parallel(spec, w, &gpus, &par);
        if p.runs_out.is_some() {
            p.fix = vllm::fitting(spec, w, &gpus, &par).map(|x| Fix::of(&x));
        }
        return Ok(Some(p));
    }
    if !req.deployment.is_empty() {
        // Adapters and a draft are priced on the one card; the offload placement is the model's.
        return Ok(None);
    }
    // ollama's num_gpu: llama-server offloads that many layers whether they fit or not.
    let num_gpu = req
        .ollama
        .and_then(|o| o.num_gpu)
        .filter(|_| req.engine == Engine::LlamaCpp);
    let gpus = match (req.gpus.len(), req.vram) {
        (2.., _) => req.gpus.clone(),
        (_, Some(v)) if oom || num_gpu.is_some() => vec![v],
        _ if num_gpu.is_some() => vec![at.card],
        _ => return Ok(None),
    };
    let d = Devices {
        gpus,
        host_ram: at.host_ram,
        max_memory: None,
        context: e.runtime,
        strategy: crate::placement::accelerate::Strategy::Balanced,
    };
    Ok(match req.engine {
        Engine::Transformers | Engine::TransformersEager if spec.gguf.is_none() => {
            let mut p = plan_auto(spec, w.weight_dtype, &d, e);
            if p.runs_out.is_some() || p.refused.is_some() {
                p.fix = fitting_max_memory(spec, w.weight_dtype, &d, e)
                    .map(|(_, fixed)| Fix::of(&fixed));
            }
            Some(p)
        }
        Engine::LlamaCpp => {
            let split = Split {
                ngl: num_gpu.unwrap_or(999),
                tensor_split: even_or_by_size(&d.gpus),
                kv_offload: true,
            };
            let mut p = plan_layers(spec, w.weight_dtype, &d, &split, e);
            if p.runs_out.is_some() {
                p.fix = fitting_ngl(spec, w.weight_dtype, &d, &split, e);
            }
            Some(p)
        }
        _ => None,
    })
}

/// `--tensor-split` as a person writes it: `1,1` for equal cards, else each card's GiB (what
/// llama.cpp's default split by free memory comes to).
fn even_or_by_size(gpus: &[u64]) -> Vec<f64> {
    if gpus.windows(2).all(|w| w[0] == w[1]) {
        return vec![1.0; gpus.len()];
    }
    gpus.iter().map(|&g| (g >> 30).max(1) as f64).collect()
}

/// What `plan` assumes of ollama: the tag it resolved, the context and the llama-server it
/// launches, and how many layers land on the GPU.
#[derive(Debug, Clone, Serialize)]
pub struct OllamaFacts {
    /// The ollama source its defaults are read from.
    pub version: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag_source: Option<&'static str>,
    pub quant: crate::dtype::WeightDtype,
    pub num_ctx: u64,
    /// `num_ctx` is ollama's automatic one (none set).
    pub num_ctx_auto: bool,
    /// OLLAMA_NUM_PARALLEL (`--parallel`).
    pub num_parallel: u64,
    /// The llama-server command line ollama starts, as far as memory goes.
    pub launches: String,
    /// Layers on the GPU: all of them, the `num_gpu` llama-server fits, or `None` (none fit).
    pub layers_on_gpu: Option<u64>,
    /// `num_gpu` as set (`--num-gpu`): ollama passes `-ngl` and does not fit layers itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_gpu: Option<u64>,
    /// ollama's settings read from the environment, as `NAME=value` (a flag wins over them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub from_environment: Vec<String>,
}

/// ollama's workload: the tag's quant (Q4_K_M where nothing says otherwise), an f16 cache unless
/// OLLAMA_KV_CACHE_TYPE (`--kv-dtype`) says otherwise, `num_ctx` (its automatic one by the card),
/// and the llama-server flags it launches.
fn ollama_launch(
    req: &PlanRequest,
    o: &crate::estimate::ollama::OllamaArgs,
    tag: Option<crate::model::ollama_tags::Resolved>,
    spec: &crate::model::Spec,
    w: &mut Workload,
    vram: u64,
    notes: &mut Vec<String>,
) -> OllamaFacts {
    use crate::estimate::ollama as ol;
    let quant = match (req.dtype, tag) {
        (Some(d), _) => d,
        (None, Some(t)) => t.quant,
        (None, None) if spec.gguf.is_some() => w.weight_dtype,
        (None, None) => {
            notes.push(
                "ollama pulls a Q4_K_M GGUF for most library models: weights priced in q4_k_m \
                 (--dtype sets another)"
                    .to_string(),
            );
            crate::dtype::WeightDtype::Gguf(crate::dtype::GgufMix::Q4KM)
        }
    };
    w.weight_dtype = quant;
    w.kv_dtype = req.kv_dtype.unwrap_or(crate::dtype::KvDtype::F16);
    let num_ctx = o
        .num_ctx
        .unwrap_or_else(|| ol::default_num_ctx(vram, spec.max_position_embeddings));
    // Some families run one slot whatever OLLAMA_NUM_PARALLEL says (server/sched.go).
    if w.batch > 1 && ol::one_slot_only(&spec.architecture) {
        notes.push(format!(
            "ollama runs {} with one slot whatever OLLAMA_NUM_PARALLEL says (\"model \
             architecture does not currently support parallel requests\"): planned with 1, not {}",
            spec.architecture, w.batch
        ));
        w.batch = 1;
    }
    let parallel = w.batch.max(1);
    let ctx = num_ctx.saturating_mul(parallel);
    let small = ol::launch(num_ctx, parallel, ol::generation_batch(0));
    let mut ub = ol::generation_batch(ctx);
    if ub > small.ubatch.unwrap_or(512) {
        let predicted =
            crate::estimate::llamacpp::estimate(spec, &Workload { llama: small, ..*w }, vram).total;
        if !ol::generation_batch_fits(ub, predicted, vram) {
            ub = small.ubatch.unwrap_or(512);
        }
    }
    // num_batch (`--ubatch-size`) sets -b and -ub; OLLAMA_FLASH_ATTENTION (`--flash-attn`) -fa.
    let ub = req.llama.ubatch.or(req.llama.batch).unwrap_or(ub);
    w.llama = LlamaCppArgs {
        flash_attn: req.llama.flash_attn,
        ..ol::launch(num_ctx, parallel, ub)
    };
    let launches = format!(
        "llama-server -c {ctx} -np {parallel} -b {ub} -ub {ub}{}{}{}",
        match w.kv_dtype {
            crate::dtype::KvDtype::F16 => String::new(),
            k => format!(" --cache-type-k {k} --cache-type-v {k}"),
        },
        match w.llama.flash_attn {
            Some(true) => " -fa on",
            Some(false) => " -fa off",
            None => "",
        },
        o.num_gpu.map_or(String::new(), |n| format!(" -ngl {n}"))
    );
    let env = o.from_env;
    let from_environment: Vec<String> = [
        env.num_parallel.map(|n| format!("OLLAMA_NUM_PARALLEL={n}")),
        env.kv_cache_type
            .map(|k| format!("OLLAMA_KV_CACHE_TYPE={k}")),
        env.flash_attention
            .map(|f| format!("OLLAMA_FLASH_ATTENTION={}", u8::from(f))),
        env.context_length
            .map(|n| format!("OLLAMA_CONTEXT_LENGTH={n}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !from_environment.is_empty() {
        notes.push(format!(
            "ollama's environment: {}",
            from_environment
                .iter()
                .map(|v| format!("{v} (environment)"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    notes.push(format!(
        "ollama ({}): num_ctx {}{} × OLLAMA_NUM_PARALLEL {parallel} → {launches}; {}",
        ol::VERSION,
        crate::units::group(num_ctx),
        if o.num_ctx.is_none() {
            " (its default for this card and model)"
        } else {
            ""
        },
        match o.num_gpu {
            Some(n) => format!(
                "num_gpu {n} → -ngl {n}: llama-server offloads that many of its {} layers (the \
                 {} blocks, the last ones first, and the output) and fits nothing itself",
                spec.num_layers.saturating_add(1),
                spec.num_layers
            ),
            None => "-ngl is left to llama-server, which keeps on the GPU the layers that fit"
                .to_string(),
        }
    ));
    if w.total_tokens() > num_ctx {
        notes.push(format!(
            "prompt + new tokens ({}) are more than num_ctx {}: ollama truncates the prompt (or \
             shifts the context), it does not grow the cache",
            crate::units::group(w.total_tokens()),
            crate::units::group(num_ctx)
        ));
    }
    if let Some(t) = tag {
        notes.push(format!(
            "{} is {} in {} ({})",
            t.tag.tag, t.tag.model, quant, t.tag.source
        ));
    }
    OllamaFacts {
        version: ol::VERSION,
        tag: tag.map(|t| t.tag.tag),
        tag_source: tag.map(|t| t.tag.source),
        quant,
        num_ctx,
        num_ctx_auto: o.num_ctx.is_none(),
        num_parallel: parallel,
        launches,
        layers_on_gpu: None,
        num_gpu: o.num_gpu,
        from_environment,
    }
}

/// A serving engine's token budget is its KV pool's (`budget::pool`): the table, the largest
/// prompt and batch, and the what-if rows of the same engine, each from the pool that engine
/// sizes at start — so they agree with its start-up verdict above them.
fn pool_budget(
    req: &PlanRequest,
    spec: &crate::model::Spec,
    w: &Workload,
    vram: u64,
    deployment: &Deployment,
    (vllm, sglang): (
        Option<&crate::estimate::VllmStartup>,
        Option<&crate::estimate::SglangStartup>,
    ),
    (budget, quantization): (&mut Budget, &mut [WhatIf]),
) {
    use crate::budget::pool::{follow, follow_what_if, Pool};
    let pool = match (vllm, sglang) {
        (Some(s), _) => Pool::vllm(s),
        (None, Some(s)) => Pool::sglang(s),
        (None, None) => return,
    };
    follow(budget, &pool, w);
    for row in quantization.iter_mut().filter(|r| r.engine == req.engine) {
        let alt = Workload {
            weight_dtype: row.dtype,
            kv_dtype: if row.dtype == w.weight_dtype {
                w.kv_dtype
            } else {
                row.dtype.compute_kv_dtype()
            },
            ..*w
        };
        let pool = if vllm.is_some() {
            Pool::vllm(&crate::estimate::vllm_startup_with(
                spec, &alt, vram, &req.vllm, deployment,
            ))
        } else {
            Pool::sglang(&crate::estimate::sglang_startup::startup_tp(
                spec,
                &alt,
                vram,
                &req.sglang,
                sglang_tp(req),
            ))
        };
        follow_what_if(row, &pool, spec.max_position_embeddings);
    }
}

/// SGLang's flags only with `--engine sglang`, each in range; SGLang is planned on one card.
fn check_sglang(req: &PlanRequest) -> Result<()> {
    req.sglang.check()?;
    if req.engine != Engine::Sglang {
        if let Some((flag, twin)) = req.sglang.first_given() {
            return Err(InputError::Usage(match req.engine {
                Engine::Vllm => {
                    format!("{flag} is an SGLang flag; vLLM's is {twin} (or add --engine sglang)")
                }
                _ => format!(
                    "{flag} is an SGLang flag; add --engine sglang (this plan is for {})",
                    req.engine
                ),
            })
            .into());
        }
        return Ok(());
    }
    let p = &req.parallel;
    if p.pipeline.is_some_and(|n| n > 1) || p.nodes.is_some() {
        return Err(InputError::Usage(
            "SGLang is planned on one node with --tp; --pipeline-parallel-size and --nodes are \
             not modelled for it yet (or --engine vllm)"
                .into(),
        )
        .into());
    }
    let tp = sglang_tp(req);
    let cards = req.gpus.len();
    if cards > 1 && req.gpus.iter().any(|&g| g != req.gpus[0]) {
        return Err(InputError::Usage(
            "SGLang's --tp ranks run on cards of one kind; give them as 2x24GiB (the smallest \
             card, if they differ)"
                .into(),
        )
        .into());
    }
    if cards > 1 && tp as usize != cards {
        return Err(InputError::Usage(format!(
            "--tp {tp} with {cards} cards in --vram: SGLang puts one rank on each GPU; give as \
             many cards as ranks ({tp}x<card>) or one card"
        ))
        .into());
    }
    Ok(())
}

/// SGLang's `--tp`: as given, else one rank on each card of --vram.
fn sglang_tp(req: &PlanRequest) -> u64 {
    req.parallel.tensor.unwrap_or(req.gpus.len().max(1) as u64)
}

/// The SGLang flag that does what a vLLM flag does.
fn sglang_twin(vllm_flag: &str) -> Option<&'static str> {
    match vllm_flag {
        "--gpu-memory-utilization" => Some("--mem-fraction-static"),
        "--max-model-len" => Some("--context-length"),
        "--max-num-seqs" => Some("--max-running-requests"),
        "--max-num-batched-tokens" => Some("--chunked-prefill-size"),
        _ => None,
    }
}
