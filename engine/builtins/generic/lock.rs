//! `lock.acquire`: take a `mkdir` lock (see [`crate::floor::locks`]), held by the run's own
//! [`HeldLocks`](crate::floor::locks::HeldLocks) from its stage to the end of the run. It waits
//! for a held lock only when asked to (`wait`), and then no longer than that, the stage's
//! timeout or an interrupt.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::builtins::args::{self, parse};
use crate::builtins::{Builtin, BuiltinCtx, BuiltinError, BuiltinResult};
use crate::floor::locks::{try_acquire, Attempt};

pub(super) fn builtins() -> Vec<Builtin> {
    vec![Builtin {
        name: "lock.acquire",
        description: "take a mkdir lock, held until the run ends; waits for it only when asked to",
        writes: true,
        with_schema: args::schema::<LockArgs>,
        with_parse: args::parses::<LockArgs>,
        output_schema,
        run,
    }]
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct LockArgs {
    /// the lock folder
    path: String,
    /// a lock whose holder's heartbeat is older than this is taken over, e.g. "600s" (a lock
    /// whose holder is gone is taken over at once)
    #[schemars(transform = args::not_null)]
    stale_after: Option<String>,
    /// how long to wait for a lock another run holds before giving up, e.g. "120s" (default:
    /// no wait); the lock is tried again every 100 ms
    #[schemars(transform = args::not_null)]
    wait: Option<String>,
}

/// How often a held lock is tried again while waiting for it.
const RETRY_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

fn output_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["acquired", "path", "took_over_stale"],
        "properties": {
            "acquired": { "type": "boolean", "description": "false when another run holds the lock" },
            "path": { "type": "string", "description": "The lock folder, absolute" },
            "took_over_stale": { "type": "boolean", "description": "true when a stale lock was removed and taken" }
        },
        "examples": [{ "acquired": true, "path": "lock.d", "took_over_stale": false }]
    })
}

fn run(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: LockArgs = parse("lock.acquire", with)?;
    let stale_after = match args.stale_after.as_deref() {
        Some(text) => {
            Some(crate::template::functions::parse_duration(text).map_err(BuiltinError::new)?)
        }
        None => None,
    };
    let wait = match args.wait.as_deref() {
        Some(text) => {
            crate::template::functions::parse_duration(text).map_err(BuiltinError::new)?
        }
        None => std::time::Duration::ZERO,
    };
    let target = ctx.writes.check(&ctx.resolve(&args.path))?;
    let until = std::time::Instant::now() + wait;
    let attempt = loop {
        let attempt = try_acquire(&target, stale_after).map_err(|e| {
            BuiltinError::new(format!("cannot create lock `{}`: {e}", target.display()))
        })?;
        let now = std::time::Instant::now();
        if !matches!(attempt, Attempt::Busy) || now >= until {
            break attempt;
        }
        ctx.cancel.sleep(RETRY_EVERY.min(until - now))?;
    };
    let shown = target.display().to_string();
    Ok(match attempt {
        Attempt::Acquired {
            lock,
            took_over_stale,
        } => {
            ctx.locks.hold(lock);
            json!({ "acquired": true, "path": shown, "took_over_stale": took_over_stale })
        }
        Attempt::Busy => {
            json!({ "acquired": false, "path": shown, "took_over_stale": false })
        }
    })
}
