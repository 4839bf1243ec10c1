//! The words around memory: which lines are worth reading at all, which deny an OOM ("no CUDA
//! out of memory errors were seen"), which only look like one (an illegal memory access), and
//! the net that catches an OOM in a wording no reader knows — so that an OOM is never `none`.

use std::sync::{LazyLock, OnceLock};

use aho_corasick::AhoCorasick;
use regex::Regex;

use super::parse::{any_word, contains_caseless, re, Event, Scan};

/// A cheap first look: a line without any of these cannot be an event, so the readers' regexes
/// only run on the few lines that have one (this keeps `explain` fast on long training logs).
pub fn worth_reading(line: &str) -> bool {
    static ANCHORS: OnceLock<Regex> = OnceLock::new();
    re(
        &ANCHORS,
        r"(?:memory|Memory|MEMORY|alloc|Alloc|ALLOC|OOM|oom|ENOMEM|Killed|killed|137|KV cache|kv cache|nough|nsufficient|INSUFFICIENT|RESOURCE_EXHAUSTED|status 5|could not be created|prefill tokens|max seq len|mem-fraction|xceed|Reason:|is_good|CUBLAS|OUT_OF_MEMORY|hipError|runs out|Terminated|buffer maximum|profiled value|paging file|1455|executable batch size|cache blocks|o create context|o create the llama context|available VRAM|code = -9|exitcode: -9|ram_unused|buffer is nil|OUT_OF_RESOURCES|OUT_OF_ME|pages \(only|oo small|available slots|large for cache|blocks|free block|cache_bytes|worst-case request|hold even one|llama_decode returned|devices to map|fixed model components|not fit|full model on GPU|buffer failed|is available under|unfolding row|failed with code: 3|metal resource|ret = -2|ret = -3|nonzero: -2|Compute error|error -2|code: -9|: -9 \(pid|SIGKILL|signal 9|ObjectStoreFull|error 12|model requires|swap space|KV Cache is|esource exhausted|OutOfMemory|need_size)",
    )
    .is_match(line)
}

/// A sentence that says there was no out-of-memory error.
pub fn negated(line: &str) -> bool {
    static NEG: OnceLock<Regex> = OnceLock::new();
    re(
        &NEG,
        r"(?i)(?-u:\b)(?:no|zero|without|never|didn't|did not|0)\s+(?:[A-Za-z0-9_-]+\s+){0,3}?(?:out of memory|ooms?|run(?:ning)? out of memory)(?-u:\b)",
    )
    .is_match(line)
}

/// Messages that mention memory but are not an allocation failure: kernel faults, missing
/// kernels, collective errors, version mismatches, asserts, and vLLM's preemption warning.
fn look_alike(line: &str) -> bool {
    const LOOK_ALIKES: &[&str] = &[
        "illegal memory access",
        "no kernel image",
        "CUDNN_STATUS_NOT_INITIALIZED",
        "CUBLAS_STATUS_NOT_INITIALIZED",
        "device-side assert",
        "driver version is insufficient",
        "is preempted",
        "not enough KV cache space",
        "misaligned address",
        // SGLang's retraction without its "out of memory" words (the info line that lists them).
        "Retract requests",
        "Memory access fault",
    ];
    // Both lists of words (the look-alikes and the notices below) in one automaton: one walk of
    // the line instead of two.
    static WORDS: LazyLock<Vec<&str>> = LazyLock::new(|| [LOOK_ALIKES, NOT_A_FAILURE].concat());
    static LOOKS: OnceLock<Option<AhoCorasick>> = OnceLock::new();
    any_word(&LOOKS, &WORDS, line)
        || (line.contains("NCCL") && !device_memory_ran_out(line))
        // A kernel's on-chip shared memory (TensorRT-LLM's MMHA, Triton's "out of resource:
        // shared memory") is not the card's memory; /dev/shm (docker's "shm") is the host's.
        || (line.contains("shared memory")
            && !line.contains("shm")
            && (line.contains("kernel") || line.contains("out of resource") || line.contains("Hardware limit")))
        // llama.cpp falls back to pageable memory when pinning fails (ollama-5517,
        // llama.cpp-9629): a warning, not an out-of-memory.
        || (line.contains("ggml_cuda_host_malloc") && line.contains("of pinned memory"))
        // llama.cpp's mlock of the model hits RLIMIT_MLOCK ("failed to mlock … Cannot allocate
        // memory", "Try increasing RLIMIT_MLOCK"): a warning about locked pages, not the card or
        // the host running out (llama-cpp-python-618, h2ogpt-812).
        || (line.contains("failed to mlock") || line.contains("RLIMIT_MLOCK"))
        // An estimate that is not a number (LM Studio's guardrail: "this model requires
        // approximately NaN undefined of memory", lmstudio-1038): the estimator failed, nothing
        // ran out.
        || (line.contains("NaN") && line.contains("requires approximately"))
        // Warnings and notices about memory that are not a failure (each from the engine's
        // source, tests/fixtures/messages): TensorFlow's BFC allocator retrying ("The caller
        // indicates that this is not a failure"), a pod that cannot be scheduled yet, docker's
        // note that the OOM killer is off, ollama evicting a model it predicts will not fit,
        // Triton falling back to pageable memory, DeepSpeed flattening on the CPU, accelerate's
        // device-map notice that a device got no modules ([`NOT_A_FAILURE`], searched above).
        || (line.contains("FailedScheduling") && line.contains("Insufficient memory"))
}

const NOT_A_FAILURE: &[&str] = &[
    "The caller indicates that this is not a failure",
    "OOM killer is disabled for the container",
    "predicted to exceed available memory, evicting",
    "predicted usage exceeds VRAM",
    "falling back to non-pinned system memory",
    "Flattening param group",
    "no modules could be assigned to the following devices due to insufficient memory",
];

/// "out of memory" or "out of device memory": the card's memory named as run out (an NCCL line
/// that says so is an out-of-memory, not a collective's failure).
fn device_memory_ran_out(line: &str) -> bool {
    contains_caseless(line, "out of memory") || contains_caseless(line, "out of device memory")
}

/// Out-of-memory words in any wording: "out of memory" (of device / GPU / host memory, with
/// hyphens or underscores), "OOM", "failed to allocate", "cannot allocate", "could not be
/// allocated", "insufficient … memory", "not enough … memory", "*_ALLOC_FAILED", "*alloc* failed"
/// (`bm_alloc_gmem failed`, `cudaMalloc failed`), "allocation failed", "bad_alloc",
/// "MemoryError", "exceed … memory", …
pub fn says_oom(line: &str) -> bool {
    static WORDS: OnceLock<Regex> = OnceLock::new();
    let words = re(
        &WORDS,
        r"(?i:out[ _-]?of[ _-]?(?:(?:device|gpu|host|video|system)[ _-]?)?(?:memory|vram)|failed to allocate|(?:cannot|can't|can not|could not|couldn't|unable to) allocate|memory allocation failure|insufficient system resources|could not be allocated|insufficient (?:[A-Za-z]+ ){0,2}(?:memory|vram)|insufficient[A-Za-z]*memory|failed to create (?:the )?(?:llama )?context|too large for (?:the )?available (?:[A-Za-z]+ )?(?:memory|vram|ram)|not enough (?:[A-Za-z]+ ){0,2}(?:memory|vram)|memory exhausted|resource_exhausted|ran out of (?:[A-Za-z]+ )?memory|_ALLOC_FAILED|[A-Za-z_]*alloc[A-Za-z_]* failed|allocation (?:of [^ ]+ (?:[A-Za-z]+ )?)?failed|bad_alloc|(?-u:\b)MemoryError(?-u:\b)|(?-u:\b)ENOMEM(?-u:\b)|exceeds? (?:the )?available (?:[A-Za-z]+ ){0,2}budget)|(?-u:\b)OOM(?-u:\b)|maxTokensInPagedKvCache(?: \(\d+\))? must be large enough|prepare count underflow\S* @IOGPUMemory|\[metal::malloc\] Resource limit|UR_RESULT_ERROR_OUT_OF_RESOURCES",
    );
    words.is_match(line) || (line.contains("emory") && contains_caseless(line, "exceed"))
}

/// Advice about a possible OOM, not one: "If you are running out of memory, consider …"
/// (vLLM prints it at every start), "to avoid OOM", "may cause OOM".
pub fn advice(line: &str) -> bool {
    static ADVICE: OnceLock<Regex> = OnceLock::new();
    // Both patterns need "oom" or "memory" (in any case): a line with neither is no advice, and
    // answers without a regex. Non-ASCII text goes to the regexes, whose caseless matching is
    // Unicode's.
    if line.is_ascii() && !contains_caseless(line, "oom") && !contains_caseless(line, "memory") {
        return false;
    }
    re(
        &ADVICE,
        r"(?i)(?-u:\b)(?:if|in case|may|might|could|can|to avoid|to prevent|avoid(?:ing)?|prevent(?:ing)?|risk of|risking|lead to|cause|reduce|reducing|consider)(?-u:\b)[^.;]{0,40}?(?:(?-u:\b)oom(?-u:\b)|out[ -]of[ -]memory|running out of memory)",
    )
    .is_match(line)
        || example_in_parentheses(line)
}

/// An out-of-memory given as an example of what might have happened: "other ranks that didn't
/// finish loading. It is likely due to unexpected failures (e.g., OOM) or a slow node" (SGLang).
fn example_in_parentheses(line: &str) -> bool {
    static EG: OnceLock<Regex> = OnceLock::new();
    re(
        &EG,
        r"(?i)\((?:e\.g\.|for example|such as),? [^)]*?(?:(?-u:\b)oom(?-u:\b)|out[ -]of[ -]memory)[^)]*\)",
    )
    .is_match(line)
}

/// Keep a line no reader knew when it says out of memory: the log's OOM in an unknown wording.
pub fn unrecognised(lines: &[String], i: usize, st: &mut Scan) {
    if st.unrecognised.len() >= 8 {
        return;
    }
    let oom_words = st.memo.get(
        lines,
        i,
        |m| &mut m.oom_words,
        |l| says_oom(l) && !look_alike(l) && !advice(l),
    );
    if let (Some(true), Some(line)) = (oom_words, lines.get(i)) {
        st.add_fallback(i + 1, line, Event::OomWords);
    }
}

/// ggml's Vulkan backend failing to pin host memory, and the driver's reason on the next line:
/// it falls back to pageable memory and goes on (llama.cpp-9271, its maintainer: "can be safely
/// ignored"), as `ggml_cuda_host_malloc` does.
pub fn pinned_fallback(lines: &[String], i: usize) -> bool {
    let pinned = |l: &String| l.contains("ggml_vulkan: Failed to allocate pinned memory");
    lines.get(i).is_some_and(pinned)
        || (lines
            .get(i)
            .is_some_and(|l| l.contains("vk::Device::allocateMemory: ErrorOutOf"))
            && i.checked_sub(1)
                .and_then(|p| lines.get(p))
                .is_some_and(pinned))
}

/// The line of a Python traceback's header when the log stops inside that traceback before any
/// line says what failed: no exception, error, kill or abort anywhere in the log, outside the
/// frames. Such a paste shows a failure but not which one (exllamav2-663: a load cut after
/// `ERROR: Traceback`; OpenRLHF-95: a backward pass's frames and nothing under them), so it is
/// not evidence that no memory ran out.
pub fn unfinished_traceback(lines: &[String]) -> Option<usize> {
    const HEADER: &str = "Traceback (most recent call last)";
    static FAILURE: OnceLock<Regex> = OnceLock::new();
    let failure = re(
        &FAILURE,
        r"(?i)(?-u:\b)(?:error|errors|exception|failed|failure|fatal|killed|abort|aborted|segmentation fault|panicked|core dumped|terminate called|exit code|exited with|exit status|errno)(?-u:\b)|[A-Za-z](?:Error|Exception|Interrupt|Exit)(?-u:\b)",
    );
    // The traceback's header, and the thread's line above it (`Exception in thread Thread-3
    // (_model_generate):` names no exception).
    let header = |l: &str| {
        l.contains(HEADER)
            || (l.trim_start().starts_with("Exception in thread ") && l.trim_end().ends_with(':'))
    };
    let frame = |l: &str| {
        let t = l.trim_start();
        // `File "…", line N, in f`, with a rank or a logger's prefix in front.
        t.starts_with("File \"") || (t.contains(" File \"") && t.contains("\", line "))
    };
    // A logger's level and place in front of each line (vLLM's `ERROR 05-16 18:43:14
    // [core.py:343] `, uvicorn's `ERROR:    `, a rank's `[rank0]: `) say where the line came
    // from, not what failed (WeClone-83: a whole traceback logged at ERROR).
    static PREFIX: OnceLock<Regex> = OnceLock::new();
    let prefix = re(
        &PREFIX,
        r"^\s*(?:\[rank\d+\]:\s*|\((?:\w+ )?pid=\d+(?:, ip=[\d.]+)?\)\s*|(?:ERROR|WARNING|INFO|DEBUG|CRITICAL)(?::\s+|\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+(?:\[[^\]]*\]\s*)?))+",
    );
    // Most logs have no traceback: one cheap pass decides them before any regex runs.
    if !lines.iter().any(|l| l.contains(HEADER)) {
        return None;
    }
    let mut last = None;
    for (i, l) in lines.iter().enumerate() {
        let l = match prefix.find(l) {
            Some(m) => &l[m.end()..],
            None => l.as_str(),
        };
        if header(l) {
            // What a header line says before the traceback: "hit an exception:" names none, "NCCL
            // error: unhandled system error" does (vllm-7800).
            let before = l.split("Traceback").next().unwrap_or_default();
            let named = before
                .replace("exception", "")
                .replace("Exception in thread", "");
            if failure.is_match(&named) {
                return None;
            }
            if l.contains(HEADER) {
                last = Some(i + 1);
            }
        } else if !frame(l) && failure.is_match(l) {
            return None;
        }
    }
    last
}

/// Whether a line is a look-alike (for readers that match broad wordings).
pub fn is_look_alike(line: &str) -> bool {
    look_alike(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &[&str]) -> Vec<String> {
        s.iter().map(|l| (*l).to_string()).collect()
    }

    #[test]
    fn a_traceback_cut_before_its_exception_is_unfinished() {
        // ms-swift-2127: a generate thread's frames and nothing under them.
        let cut = lines(&[
            "Exception in thread Thread-3 (_model_generate):",
            "Traceback (most recent call last):",
            "  File \"/x/threading.py\", line 1016, in _bootstrap_inner",
            "    self.run()",
            "  File \"/x/transformers/generation/utils.py\", line 3009, in _sample",
            "    outputs = self(**model_inputs, return_dict=True)",
        ]);
        assert_eq!(unfinished_traceback(&cut), Some(2));
        // A logger's prefix on the header (exllamav2-663: `ERROR:    Traceback …`).
        let prefixed = lines(&[
            "INFO: Loading model",
            "ERROR:    Traceback (most recent call last):",
        ]);
        assert_eq!(unfinished_traceback(&prefixed), Some(2));
        // vLLM logs a whole traceback at ERROR (WeClone-83): the level is not the failure.
        let logged = lines(&[
            "ERROR 05-16 18:43:14 [core.py:343] EngineCore hit an exception: Traceback (most recent call last):",
            "ERROR 05-16 18:43:14 [core.py:343]   File \"/x/vllm/v1/engine/core.py\", line 335, in run_engine_core",
            "ERROR 05-16 18:43:14 [core.py:343]     engine_core = EngineCoreProc(*args, **kwargs)",
        ]);
        assert_eq!(unfinished_traceback(&logged), Some(1));
        let said = lines(&[
            "[rank0]: Traceback (most recent call last):",
            "[rank0]: RuntimeError: boom",
        ]);
        assert_eq!(unfinished_traceback(&said), None);
        // The error named on the header's own line (vllm-7800).
        let header = lines(&["(VllmWorkerProcess pid=232) ERROR 08-23 08:25:25 utils.py:226] Exception in worker while processing method init_device: NCCL error: unhandled system error, Traceback (most recent call last):"]);
        assert_eq!(unfinished_traceback(&header), None);
    }

    #[test]
    fn a_traceback_with_an_error_anywhere_is_not_unfinished() {
        let mut whole = lines(&[
            "Traceback (most recent call last):",
            "  File \"/x/error_handlers.py\", line 3, in f",
            "    g()",
        ]);
        // A frame whose path says "error" is no error line.
        assert_eq!(unfinished_traceback(&whole), Some(1));
        whole.push("RuntimeError: CUDA error: an illegal memory access was encountered".into());
        assert_eq!(unfinished_traceback(&whole), None);
        // The error pasted above the traceback (vllmv1-14452) counts too.
        let above = lines(&[
            "ERROR 07-28 [core.py:632] RuntimeError: CUDA error: no kernel image is available",
            "Traceback (most recent call last):",
            "  File \"/x/core.py\", line 623, in run_engine_core",
        ]);
        assert_eq!(unfinished_traceback(&above), None);
        // A killed process and a log without a traceback are not unfinished tracebacks.
        assert_eq!(
            unfinished_traceback(&lines(&["Traceback (most recent call last):", "Killed"])),
            None
        );
        assert_eq!(
            unfinished_traceback(&lines(&["Loading model", "done"])),
            None
        );
    }

    #[test]
    fn an_out_of_memory_given_as_an_example_or_a_risk_is_advice() {
        assert!(advice("ValueError: TP rank 0 could finish the model loading, but there are other ranks that didn't finish loading. It is likely due to unexpected failures (e.g., OOM) or a slow node."));
        assert!(advice("its allocations are outside the memory the engine profiled -- risking OOM or a silently shrunken cache."));
        assert!(!advice(
            "RuntimeError: CUDA out of memory (e.g. the card is full)x"
        ));
    }

    #[test]
    fn an_allocator_that_says_it_failed_is_out_of_memory() {
        // sophgo-llmtpu-8 (fresh corpus): a TPU runtime's own allocator.
        assert!(says_oom(
            "[bmlib_memory][error] bm_alloc_gmem failed, dev_id = 0, size = 0xc0fb4000"
        ));
        assert!(says_oom("cudaMalloc failed: out of memory"));
        assert!(says_oom("memory allocation of 16 bytes failed"));
        assert!(!says_oom(
            "allocated 3 buffers; loading failed for another reason"
        ));
    }

    #[test]
    fn memory_errors_named_in_one_word_and_sizes_too_large_for_the_card_are_out_of_memory() {
        // node-llama-cpp (the 2026-12 held-out set): a class name, not words.
        assert!(says_oom("Error: InsufficientMemoryError: A context size of 4096 with 4 sequences is too large for the available VRAM"));
        assert!(says_oom("the model is too large for the available memory"));
        assert!(says_oom(
            "Error: Prefill context too large for available memory (preflight safety guard"
        ));
        assert!(!says_oom("the prompt is too large for the context window"));
        // llama.cpp's frontends when llama_new_context_with_model returns null: its KV cache or
        // compute buffer did not fit (llamacpp-eullm-302): an out-of-memory of unknown part.
        assert!(says_oom(
            "Failed to create context: null reference from llama.cpp"
        ));
    }
}
