use super::*;
use crate::verdict::record::Role;

const GIB: u64 = 1 << 30;

fn stage(name: Stage, outcome: StageOutcome, c: Components, oom: Option<OomFacts>) -> StageRecord {
    StageRecord {
        name,
        outcome,
        memory: StageMemory {
            before: c.weights + c.other,
            peak: c.total(),
            after: c.weights + c.other,
        },
        components: c,
        seconds: 0.1,
        detail: "test".into(),
        prompt_tokens: None,
        new_tokens: None,
        batch: Some(8),
        ttft_seconds: None,
        tokens_per_second: None,
        oom,
        reason: None,
        fragmentation: None,
        allocator_slack: 0,
        timeline: Vec::new(),
        fresh_process: false,
    }
}

fn oom(requested: u64, held: u64, part: Part) -> OomFacts {
    OomFacts {
        requested: Some(requested),
        held,
        part,
        message: "CUDA_ERROR_OUT_OF_MEMORY".into(),
        free: Some(GIB / 2),
        largest_block: Some(GIB / 2),
        cached: Some(0),
        emulated: false,
    }
}

fn card(others: Vec<GpuProcess>, emulated: bool) -> CardFacts {
    CardFacts {
        capacity: 24 * GIB,
        emulated_limit: emulated.then_some(24 * GIB),
        others,
        weights_bytes: 13 * GIB,
    }
}

fn comp(w: u64, kv: u64, act: u64) -> Components {
    Components {
        weights: w,
        kv_cache: kv,
        activations: act,
        other: GIB / 2,
    }
}

#[test]
fn each_failing_stage_names_its_cause() {
    let ok = stage(Stage::Load, StageOutcome::Ok, comp(13 * GIB, 0, 0), None);
    let c = card(vec![], true);
    let load = stage(
        Stage::Load,
        StageOutcome::Oom,
        comp(20 * GIB, 0, 0),
        Some(oom(GIB, 23 * GIB, Part::Weights)),
    );
    assert_eq!(classify(&[load], &c).cause, Cause::Weights);
    // A long context: the cache allocation itself fails.
    let kv = stage(
        Stage::FirstToken,
        StageOutcome::Oom,
        comp(13 * GIB, 0, 0),
        Some(oom(11 * GIB, 14 * GIB, Part::KvCache)),
    );
    let v = classify(&[ok.clone(), kv], &c);
    assert_eq!((v.cause, v.stage), (Cause::KvCache, Stage::FirstToken));
    // The cache fits, the prefill's activations are about as large: still the KV cache.
    let close = stage(
        Stage::LongGeneration,
        StageOutcome::Oom,
        comp(13 * GIB, 5 * GIB, 0),
        Some(oom(2 * GIB, 22 * GIB, Part::Activations)),
    );
    assert_eq!(classify(&[ok.clone(), close], &c).cause, Cause::KvCache);
    // Eager scores dwarf a small cache.
    let eager = stage(
        Stage::FirstToken,
        StageOutcome::Oom,
        comp(13 * GIB, GIB, 0),
        Some(oom(8 * GIB, 16 * GIB, Part::Activations)),
    );
    let v = classify(&[ok.clone(), eager], &c);
    assert_eq!(v.cause, Cause::Activations);
    assert!(v.contributing.iter().any(|x| x.cause == Cause::Weights));
    let conc = stage(
        Stage::Concurrency,
        StageOutcome::Oom,
        comp(13 * GIB, 8 * GIB, 0),
        Some(oom(2 * GIB, 23 * GIB, Part::KvCache)),
    );
    let v = classify(&[ok.clone(), conc], &c);
    assert_eq!(v.cause, Cause::Concurrency);
    assert!(v.summary.contains("8 do not"), "{}", v.summary);
}

/// A 13 GiB model that loaded, then a first token that asked 2 GiB for activations holding 15 GiB.
fn loaded_then_first_token_ran_out() -> [StageRecord; 2] {
    [
        stage(Stage::Load, StageOutcome::Ok, comp(13 * GIB, 0, 0), None),
        stage(
            Stage::FirstToken,
            StageOutcome::Oom,
            comp(13 * GIB, GIB, 0),
            Some(oom(2 * GIB, 15 * GIB, Part::Activations)),
        ),
    ]
}

#[test]
fn other_processes_and_fragmentation_come_from_the_meters() {
    let [ok, failed] = loaded_then_first_token_ran_out();
    let notebook = GpuProcess {
        pid: 4121,
        name: "python".into(),
        bytes: Some(10 * GIB),
    };
    // Without a limit, 10 GiB held by a notebook is why 17 GiB do not fit on what is left.
    let shared = CardFacts {
        capacity: 14 * GIB,
        emulated_limit: None,
        others: vec![notebook.clone()],
        weights_bytes: 13 * GIB,
    };
    let v = classify(&[ok.clone(), failed.clone()], &shared);
    assert_eq!(v.cause, Cause::OtherProcess);
    assert!(v
        .evidence
        .iter()
        .any(|e| e.text.contains("process 4121 (python) holds 10.0 GiB")));
    // Under an emulated card, other processes are not the question.
    let emulated = CardFacts {
        emulated_limit: Some(14 * GIB),
        ..shared
    };
    assert_ne!(
        classify(&[ok.clone(), failed.clone()], &emulated).cause,
        Cause::OtherProcess
    );
    // 3 GiB free in total, the largest block 1 GiB: a 2 GiB request failed for want of a piece.
    let mut frag = failed;
    frag.oom = Some(OomFacts {
        free: Some(3 * GIB),
        largest_block: Some(GIB),
        ..oom(2 * GIB, 15 * GIB, Part::Activations)
    });
    let v = classify(&[ok.clone(), frag.clone()], &card(vec![], true));
    assert_eq!(v.cause, Cause::Fragmentation);
    // The pool had the bytes cached but not in one piece.
    frag.oom = Some(OomFacts {
        cached: Some(3 * GIB),
        ..oom(2 * GIB, 15 * GIB, Part::Activations)
    });
    assert_eq!(
        classify(&[ok, frag], &card(vec![], true)).cause,
        Cause::Fragmentation
    );
}

#[test]
fn a_pool_with_cached_blocks_does_not_hide_weights_that_are_too_large() {
    // Llama-2-13B on a 24 GiB card (measured on the H200): the load failed for 270 MiB with
    // 1.25 GiB cached in the pool, but 24.2 GiB of weights never fit.
    let mut load = stage(Stage::Load, StageOutcome::Oom, comp(22 * GIB, 0, 0), None);
    load.oom = Some(OomFacts {
        free: Some(245 << 20),
        largest_block: Some(245 << 20),
        cached: Some(1280 << 20),
        ..oom(270 << 20, 23 * GIB, Part::Weights)
    });
    let mut c = card(vec![], true);
    c.weights_bytes = 24_826 << 20;
    assert_eq!(classify(&[load], &c).cause, Cause::Weights);
}

/// The record of a first-token step that ran out on a 24 GiB card: 13 GiB of weights, a
/// 1 GiB cache, half a GiB of context, 15 GiB held and 2 GiB asked for activations.
fn failed_record() -> MemoryRecord {
    MemoryRecord {
        limit: Some(24 * GIB),
        limit_emulated: Some(false),
        free: Some(GIB / 2),
        this_process: Some(15 * GIB),
        reserved_unallocated: Some(0),
        largest_free_block: Some(GIB / 2),
        other_processes: Some(0),
        request: Some(2 * GIB),
        request_for: Some(Role::Activations),
        need: Some(17 * GIB),
        live: super::super::record::LiveByRole {
            weights: Some(13 * GIB),
            kv_cache: Some(GIB),
            activations: Some(0),
            other: Some(GIB / 2),
            unattributed: None,
        },
        model_weights: Some(13 * GIB),
        stage: Some(Stage::FirstToken),
        ..MemoryRecord::default()
    }
}

#[test]
fn the_d_rules_decide_from_the_record_alone() {
    let r = failed_record();
    let f = Failed::of(&r).expect("a stage ran out");
    assert_eq!(
        (f.need, f.kv, f.act_need),
        (17 * GIB, GIB, 2 * GIB + GIB / 2)
    );
    // 2.5 GiB of activations beside a 1 GiB cache: activations.
    assert_eq!(oom_rule(&r), Some(OomRule::Stage(Cause::Activations)));
    // A request for the cache counts toward it, and names it.
    let kv = MemoryRecord {
        request_for: Some(Role::KvCache),
        ..r.clone()
    };
    assert_eq!(Failed::of(&kv).map(|f| f.kv), Some(3 * GIB));
    assert_eq!(oom_rule(&kv), Some(OomRule::Stage(Cause::KvCache)));
    // The stage names the part before the request does.
    for (stage, cause) in [
        (Stage::Load, Cause::Weights),
        (Stage::Concurrency, Cause::Concurrency),
    ] {
        let at = MemoryRecord {
            stage: Some(stage),
            ..kv.clone()
        };
        assert_eq!(oom_rule(&at).map(OomRule::cause), Some(cause));
        assert_eq!(oom_rule(&at).map(OomRule::code), Some(Code::D3));
    }
    // D1: on a 14 GiB card with 10 GiB held by others, 17 GiB would fit without them …
    let shared = MemoryRecord {
        limit: Some(14 * GIB),
        other_processes: Some(10 * GIB),
        ..r.clone()
    };
    assert_eq!(
        oom_rule(&shared),
        Some(OomRule::OtherProcess { others: 10 * GIB })
    );
    // … unless `--vram-limit` made the card small on purpose.
    let emulated = MemoryRecord {
        limit_emulated: Some(true),
        ..shared
    };
    assert_eq!(oom_rule(&emulated).map(OomRule::code), Some(Code::D3));
    // D2: 3 GiB free, none of it in a 2 GiB piece.
    let holes = MemoryRecord {
        free: Some(3 * GIB),
        largest_free_block: Some(GIB),
        ..r.clone()
    };
    assert_eq!(
        oom_rule(&holes),
        Some(OomRule::Fragmentation { request: 2 * GIB })
    );
    // Weights that never fit stay the cause, however the pool looks.
    let too_large = MemoryRecord {
        model_weights: Some(23 * GIB),
        ..holes
    };
    assert_eq!(oom_rule(&too_large).map(OomRule::code), Some(Code::D3));
    // No stage ran out: no D rule.
    let fine = MemoryRecord {
        stage: None,
        need: None,
        ..r
    };
    assert_eq!(oom_rule(&fine), None);
}

#[test]
fn the_verdict_carries_the_record_it_was_decided_from() {
    let [ok, failed] = loaded_then_first_token_ran_out();
    let c = card(vec![], false);
    let v = classify(&[ok, failed], &c);
    let r = v.record.as_ref().expect("a record");
    assert_eq!(oom_rule(r).map(OomRule::code), v.rule);
    assert_eq!(oom_rule(r).map(OomRule::cause), Some(v.cause));
    assert_eq!(r.need, Some(17 * GIB));
    assert_eq!(r.request_for, Some(Role::Activations));
    assert_eq!(r.model_weights, Some(13 * GIB));
    assert_eq!(r.limit_emulated, Some(false));
}

#[test]
fn a_run_that_fits_says_so_and_notes_a_fragmented_card() {
    let mut ok = stage(
        Stage::LongGeneration,
        StageOutcome::Ok,
        comp(13 * GIB, GIB, GIB),
        None,
    );
    ok.fragmentation = Some(FragmentationFacts {
        free: 8 * GIB,
        largest_block: 2 * GIB,
        searched_up_to: 8 * GIB,
        reserved: 0,
        in_use: 0,
    });
    let v = classify(&[ok], &card(vec![], true));
    assert_eq!(v.cause, Cause::None);
    assert_eq!(crate::ExitStatus::of(&v).code(), 0);
    assert!(
        v.summary.starts_with("peak 15.5 GiB of 24.0 GiB"),
        "{}",
        v.summary
    );
    assert_eq!(v.contributing[0].cause, Cause::Fragmentation);
}
