//! `lock.acquire`: take a `mkdir` lock (see [`crate::floor::locks`]), held by the run's own
//! [`HeldLocks`](crate::floor::locks::HeldLocks) from its stage to the end of the run; never waits.

use serde_json::{json, Value};

use super::{Builtin, BuiltinCtx, BuiltinError, BuiltinResult};
use crate::floor::locks::{try_acquire, Attempt};

pub(super) fn builtins() -> Vec<Builtin> {
    vec![Builtin {
        name: "lock.acquire",
        description: "take a mkdir lock, held until the run ends; never waits",
        writes: true,
        with_schema,
        output_schema,
        run,
    }]
}

fn with_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["path"],
        "properties": {
            "path": { "type": "string", "description": "the lock folder" },
            "stale_after": { "type": "string", "description": "a lock whose holder's heartbeat is older than this is taken over, e.g. \"600s\" (a lock whose holder is gone is taken over at once)" }
        }
    })
}

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
    let path = with
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| BuiltinError::new("`path` is required"))?;
    let stale_after = match with.get("stale_after").and_then(Value::as_str) {
        Some(text) => {
            Some(crate::template::functions::parse_duration(text).map_err(BuiltinError::new)?)
        }
        None => None,
    };
    let target = ctx.writes.check(&ctx.resolve(path))?;
    let attempt = try_acquire(&target, stale_after).map_err(|e| {
        BuiltinError::new(format!("cannot create lock `{}`: {e}", target.display()))
    })?;
    let shown = target.display().to_string();
    Ok(match attempt {
        Attempt::Acquired {
            lock,
            took_over_stale,
        } => {
            ctx.locks.hold(lock);
            json!({ "acquired": true, "path": shown, "took_over_stale": took_over_stale })
        }
        Attempt::Busy { .. } => {
            json!({ "acquired": false, "path": shown, "took_over_stale": false })
        }
    })
}
