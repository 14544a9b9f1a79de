//! `stagegraph mcp`: the workflows on the search path served as tools over the Model Context
//! Protocol, on stdio.
//!
//! Listing reads the search path through the library. Every other tool runs this same binary as a
//! child process (`check`, `plan`, `run`, `runs show`, `resume`), so a tool call behaves exactly as
//! the command line does: the same write roots, the same run record, the same exit codes. A run
//! that fails, panics or is interrupted ends its child, never the server. A cancelled tool call
//! sends the child SIGTERM, which the engine records as an interrupted run.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use rayon::prelude::*;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::engine::Engine;
use crate::format::{InputDecl, InputType};

/// The most of a child's stderr kept for an error message.
const STDERR_LIMIT: usize = 64 * 1024;

/// What the server needs to run this binary again as the command line would.
#[derive(Clone)]
pub(crate) struct McpOptions {
    /// `--library` folders, in order.
    pub libraries: Vec<PathBuf>,
    /// `--state-dir`, when given.
    pub state_dir: Option<PathBuf>,
    /// The folder runs start in (the project).
    pub cwd: PathBuf,
    /// The stagegraph binary the tools run.
    pub exe: PathBuf,
}

/// Serve the workflows on the search path as Model Context Protocol tools on stdin and stdout
/// until the client closes the connection; a tool call runs `exe` (this program) with the
/// engine's libraries and `state_dir`.
pub fn serve_mcp(engine: &Engine, state_dir: Option<PathBuf>, exe: PathBuf) -> std::io::Result<()> {
    serve(McpOptions {
        libraries: engine.libraries.clone(),
        state_dir,
        cwd: engine.cwd.clone(),
        exe,
    })
}

/// Serve the protocol on stdin and stdout until the client closes the connection.
fn serve(options: McpOptions) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let service = Server {
            options: Arc::new(options),
        }
        .serve(rmcp::transport::stdio())
        .await
        .map_err(std::io::Error::other)?;
        service.waiting().await.map_err(std::io::Error::other)?;
        Ok(())
    })
}

#[derive(Clone)]
struct Server {
    options: Arc<McpOptions>,
}

/// A workflow as the tools describe it.
struct Listed {
    name: String,
    description: Option<String>,
    inputs: Vec<(String, InputDecl)>,
    /// Why it did not check, if it did not.
    error: Option<String>,
}

impl Server {
    fn engine(&self) -> Engine {
        Engine::new(&self.options.libraries, &self.options.cwd)
    }

    fn workflows(&self) -> Vec<Listed> {
        let engine = self.engine();
        // Each workflow is checked (a tool is offered only for one that checks), in parallel:
        // a client lists the tools when it starts, and waits for them.
        engine
            .search
            .workflows()
            .into_par_iter()
            .map(|(name, _, _)| match engine.load(&name) {
                Ok(workflow) => Listed {
                    description: workflow.description.clone(),
                    inputs: workflow
                        .inputs
                        .iter()
                        .map(|(key, decl)| (key.clone(), decl.clone()))
                        .collect(),
                    name,
                    error: None,
                },
                Err(diagnostics) => Listed {
                    description: None,
                    inputs: Vec::new(),
                    error: Some(format!(
                        "{} error(s) in the workflow; run check_workflow for details",
                        diagnostics.len()
                    )),
                    name,
                },
            })
            .collect()
    }

    fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            tool(
                "list_workflows",
                "List the workflows on the search path: name, description and typed inputs.",
                json!({ "type": "object", "properties": {}, "additionalProperties": false }),
            ),
            tool(
                "check_workflow",
                "Check workflows statically (syntax, references, cycles, templates, schemas). \
                 Without a name, every workflow on the search path.",
                json!({
                    "type": "object",
                    "properties": { "name": { "type": "string", "description": "A workflow name or a path to a .toml file" } },
                    "additionalProperties": false
                }),
            ),
            tool(
                "plan_workflow",
                "Show a workflow's stage graph in execution order.",
                json!({
                    "type": "object",
                    "properties": {
                        "name": { "type": "string", "description": "A workflow name or a path to a .toml file" },
                        "format": { "type": "string", "enum": ["text", "json", "mermaid", "dot"], "default": "text" }
                    },
                    "required": ["name"],
                    "additionalProperties": false
                }),
            ),
            tool(
                "run_workflow",
                "Run a workflow with typed inputs; returns its run id, status, exit reason and outputs.",
                json!({
                    "type": "object",
                    "properties": {
                        "name": { "type": "string", "description": "A workflow name or a path to a .toml file" },
                        "inputs": { "type": "object", "description": "The workflow's inputs (see list_workflows)", "default": {} },
                        "dry_run": { "type": "boolean", "description": "Walk the graph with no side effects", "default": false },
                        "replay": { "type": "string", "description": "Answer model requests from recordings in this folder" }
                    },
                    "required": ["name"],
                    "additionalProperties": false
                }),
            ),
            tool(
                "show_run",
                "Show a run's record (run.json): stages, statuses, outputs, errors.",
                json!({
                    "type": "object",
                    "properties": { "run_id": { "type": "string", "description": "A run id, a unique prefix of one, or `last`", "default": "last" } },
                    "additionalProperties": false
                }),
            ),
            tool(
                "resume_run",
                "Run a recorded run again with its inputs, reusing every unchanged stage.",
                json!({
                    "type": "object",
                    "properties": { "run_id": { "type": "string", "description": "A run id, a unique prefix of one, or `last`" } },
                    "required": ["run_id"],
                    "additionalProperties": false
                }),
            ),
        ];
        for listed in self.workflows() {
            let name = format!("run_{}", listed.name);
            if listed.error.is_some() || !valid_tool_name(&name) {
                continue;
            }
            let description = match &listed.description {
                Some(text) => format!("Run the `{}` workflow: {text}", listed.name),
                None => format!("Run the `{}` workflow.", listed.name),
            };
            tools.push(tool(&name, &description, input_schema(&listed.inputs)));
        }
        tools
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        let tool_name = request.name.as_ref();
        match tool_name {
            "list_workflows" => Ok(self.list_workflows()),
            "check_workflow" => {
                let mut argv = vec!["check".to_string(), "--color".into(), "never".into()];
                if let Some(name) = optional_string(&arguments, "name")? {
                    argv.push(name);
                }
                Ok(self.text_command(argv).await)
            }
            "plan_workflow" => {
                let name = required_string(&arguments, "name")?;
                let format =
                    optional_string(&arguments, "format")?.unwrap_or_else(|| "text".into());
                Ok(self
                    .text_command(vec!["plan".into(), name, "--format".into(), format])
                    .await)
            }
            "run_workflow" => {
                let name = required_string(&arguments, "name")?;
                let inputs = match arguments.get("inputs") {
                    None | Some(Value::Null) => Map::new(),
                    Some(Value::Object(map)) => map.clone(),
                    Some(_) => return Err(invalid("`inputs` must be an object")),
                };
                let mut extra = Vec::new();
                if arguments.get("dry_run").and_then(Value::as_bool) == Some(true) {
                    extra.push("--dry-run".to_string());
                }
                if let Some(dir) = optional_string(&arguments, "replay")? {
                    extra.extend(["--replay".to_string(), dir]);
                }
                Ok(self.run(&name, Some(inputs), extra, &context).await)
            }
            "show_run" => {
                let id = optional_string(&arguments, "run_id")?.unwrap_or_else(|| "last".into());
                Ok(self
                    .text_command(vec!["runs".into(), "show".into(), id, "--json".into()])
                    .await)
            }
            "resume_run" => {
                let id = required_string(&arguments, "run_id")?;
                Ok(self.resume(&id, &context).await)
            }
            _ => match tool_name.strip_prefix("run_") {
                Some(workflow)
                    if self
                        .engine()
                        .search
                        .workflow_names()
                        .iter()
                        .any(|n| n == workflow) =>
                {
                    Ok(self
                        .run(workflow, Some(arguments), Vec::new(), &context)
                        .await)
                }
                _ => Err(ErrorData::invalid_params(
                    format!("no tool named `{tool_name}`; list_workflows names the workflows"),
                    None,
                )),
            },
        }
    }

    fn list_workflows(&self) -> CallToolResult {
        let workflows: Vec<Value> = self
            .workflows()
            .into_iter()
            .map(|listed| {
                let inputs: Map<String, Value> = listed
                    .inputs
                    .iter()
                    .map(|(key, decl)| {
                        let mut input = Map::new();
                        input.insert("type".into(), decl.kind.name().into());
                        if let Some(description) = &decl.description {
                            input.insert("description".into(), description.clone().into());
                        }
                        if let Some(default) = &decl.default {
                            input.insert("default".into(), default.clone());
                        }
                        input.insert("required".into(), decl.default.is_none().into());
                        (key.clone(), Value::Object(input))
                    })
                    .collect();
                json!({
                    "name": listed.name,
                    "description": listed.description,
                    "inputs": inputs,
                    "error": listed.error,
                })
            })
            .collect();
        CallToolResult::structured(json!({ "workflows": workflows }))
    }

    fn command(&self, argv: &[String]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.options.exe);
        for library in &self.options.libraries {
            command.arg("--library").arg(library);
        }
        if let Some(dir) = &self.options.state_dir {
            command.arg("--state-dir").arg(dir);
        }
        command
            .args(argv)
            .current_dir(&self.options.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }

    /// A command whose text output is the tool's result; a non-zero exit is a tool error.
    async fn text_command(&self, argv: Vec<String>) -> CallToolResult {
        let output = match self.command(&argv).output().await {
            Ok(output) => output,
            Err(error) => {
                return tool_error(format!(
                    "cannot start {}: {error}",
                    self.options.exe.display()
                ))
            }
        };
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !stderr.trim().is_empty() {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&stderr);
        }
        if output.status.success() {
            CallToolResult::success(vec![ContentBlock::text(text)])
        } else {
            CallToolResult::error(vec![ContentBlock::text(text)])
        }
    }

    async fn run(
        &self,
        workflow: &str,
        inputs: Option<Map<String, Value>>,
        extra: Vec<String>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let total = self.engine().load(workflow).ok().map(|w| w.stages.len());
        let mut argv = vec![
            "--color".to_string(),
            "never".into(),
            "run".into(),
            workflow.into(),
            "--json".into(),
        ];
        argv.extend(extra);
        if inputs.is_some() {
            argv.extend(["--inputs-json".to_string(), "-".into()]);
        }
        self.follow(argv, inputs.map(Value::Object), total, context)
            .await
    }

    async fn resume(&self, id: &str, context: &RequestContext<RoleServer>) -> CallToolResult {
        let argv = vec![
            "--color".to_string(),
            "never".into(),
            "resume".into(),
            id.into(),
            "--json".into(),
        ];
        self.follow(argv, None, None, context).await
    }

    /// Run a child that prints JSON events, report its stages as progress, and return how the
    /// run ended.
    async fn follow(
        &self,
        argv: Vec<String>,
        stdin: Option<Value>,
        total: Option<usize>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let mut command = self.command(&argv);
        if stdin.is_some() {
            command.stdin(Stdio::piped());
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(error) => {
                return tool_error(format!(
                    "cannot start {}: {error}",
                    self.options.exe.display()
                ))
            }
        };
        if let (Some(value), Some(mut pipe)) = (stdin, child.stdin.take()) {
            let _ = pipe.write_all(value.to_string().as_bytes()).await;
            drop(pipe);
        }
        let stderr = child.stderr.take().map(|pipe| {
            tokio::spawn(async move {
                let mut kept = Vec::new();
                let _ = pipe.take(STDERR_LIMIT as u64).read_to_end(&mut kept).await;
                String::from_utf8_lossy(&kept).into_owned()
            })
        });
        let progress_token = context.meta.get_progress_token();
        let mut summary = Map::new();
        let mut finished = 0usize;
        if let Some(stdout) = child.stdout.take() {
            let mut lines = BufReader::new(stdout).lines();
            loop {
                let line = tokio::select! {
                    line = lines.next_line() => line,
                    () = context.ct.cancelled() => {
                        interrupt(&child);
                        break;
                    }
                };
                let Ok(Some(line)) = line else { break };
                let Ok(Value::Object(event)) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                match event.get("event").and_then(Value::as_str) {
                    Some("run_started") => {
                        copy(&event, &mut summary, &["run_id", "workflow", "dry_run"]);
                    }
                    Some("stage_finished") => {
                        finished += 1;
                        if let Some(token) = &progress_token {
                            let stage = event.get("stage").and_then(Value::as_str).unwrap_or("?");
                            let status = event.get("status").and_then(Value::as_str).unwrap_or("?");
                            let mut param = ProgressNotificationParam::new(
                                token.clone(),
                                f64::from(u32::try_from(finished).unwrap_or(u32::MAX)),
                            )
                            .with_message(format!("{stage}: {status}"));
                            if let Some(total) = total {
                                param = param.with_total(f64::from(
                                    u32::try_from(total).unwrap_or(u32::MAX),
                                ));
                            }
                            let _ = context.peer.notify_progress(param).await;
                        }
                    }
                    Some("run_finished") => {
                        copy(
                            &event,
                            &mut summary,
                            &["status", "exit", "error", "duration_ms"],
                        );
                    }
                    Some("outputs") => {
                        copy(&event, &mut summary, &["outputs"]);
                    }
                    _ => {}
                }
            }
        }
        let status = child.wait().await;
        let stderr = match stderr {
            Some(handle) => handle.await.unwrap_or_default(),
            None => String::new(),
        };
        let code = status.ok().and_then(|s| s.code());
        summary.insert("exit_code".into(), code.map_or(Value::Null, Value::from));
        if !summary.contains_key("status") {
            // The run never started or never finished: what the engine said is the error.
            let message = if stderr.trim().is_empty() {
                "the run ended without a result".to_string()
            } else {
                stderr.trim_end().to_string()
            };
            summary.insert("error".into(), message.into());
            return CallToolResult::structured_error(Value::Object(summary));
        }
        let failed = matches!(
            summary.get("status").and_then(Value::as_str),
            Some("failed" | "interrupted")
        );
        if failed {
            CallToolResult::structured_error(Value::Object(summary))
        } else {
            CallToolResult::structured(Value::Object(summary))
        }
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("stagegraph", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "stagegraph runs declarative workflows (TOML stage graphs). list_workflows names \
                 them with their inputs; run_workflow (or run_<name>) runs one and returns its run \
                 id, status and outputs; show_run tells what a run did.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let server = self.clone();
        let tools = tokio::task::spawn_blocking(move || server.tools())
            .await
            .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(request, context)
            .await
            .map(CallToolResponse::from)
    }
}

fn tool(name: &str, description: &str, schema: Value) -> Tool {
    let Value::Object(schema) = schema else {
        unreachable!("tool schemas are objects")
    };
    Tool::new(name.to_string(), description.to_string(), Arc::new(schema))
}

/// The JSON Schema of a workflow's inputs: each typed, described and defaulted as declared;
/// inputs without a default required.
fn input_schema(inputs: &[(String, InputDecl)]) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (key, decl) in inputs {
        let mut property = Map::new();
        let kind = match decl.kind {
            InputType::String => "string",
            InputType::Integer => "integer",
            InputType::Number => "number",
            InputType::Boolean => "boolean",
            InputType::Array => "array",
            InputType::Object => "object",
        };
        property.insert("type".into(), kind.into());
        if let Some(description) = &decl.description {
            property.insert("description".into(), description.clone().into());
        }
        match &decl.default {
            Some(default) => {
                property.insert("default".into(), default.clone());
            }
            None => required.push(Value::from(key.clone())),
        }
        properties.insert(key.clone(), Value::Object(property));
    }
    let mut schema =
        json!({ "type": "object", "properties": properties, "additionalProperties": false });
    if !required.is_empty() {
        schema["required"] = Value::Array(required);
    }
    schema
}

/// Tool names clients accept: `^[A-Za-z0-9_-]{1,64}$`.
fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn copy(from: &Map<String, Value>, to: &mut Map<String, Value>, keys: &[&str]) {
    for key in keys {
        if let Some(value) = from.get(*key) {
            to.insert((*key).to_string(), value.clone());
        }
    }
}

fn interrupt(child: &tokio::process::Child) {
    if let Some(pid) = child.id().and_then(|pid| libc::pid_t::try_from(pid).ok()) {
        // SIGTERM: the engine stops its stages and records the run as interrupted.
        // SAFETY: kill(2) with a pid this server spawned and has not yet reaped.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
}

fn tool_error(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

fn invalid(message: &str) -> ErrorData {
    ErrorData::invalid_params(message.to_string(), None)
}

fn required_string(args: &JsonObject, key: &str) -> Result<String, ErrorData> {
    optional_string(args, key)?.ok_or_else(|| invalid(&format!("`{key}` is required")))
}

fn optional_string(args: &JsonObject, key: &str) -> Result<Option<String>, ErrorData> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(invalid(&format!("`{key}` must be a string"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_without_default_are_required() {
        let inputs = vec![
            (
                "name".to_string(),
                InputDecl {
                    kind: InputType::String,
                    description: Some("who".into()),
                    default: None,
                },
            ),
            (
                "loud".to_string(),
                InputDecl {
                    kind: InputType::Boolean,
                    description: None,
                    default: Some(Value::Bool(false)),
                },
            ),
        ];
        let schema = input_schema(&inputs);
        assert_eq!(schema["required"], json!(["name"]));
        assert_eq!(
            schema["properties"]["loud"],
            json!({ "type": "boolean", "default": false })
        );
        assert_eq!(schema["properties"]["name"]["description"], "who");
        assert_eq!(schema["additionalProperties"], false);
    }

    #[test]
    fn tool_names_follow_the_client_grammar() {
        assert!(valid_tool_name("run_context-update"));
        assert!(!valid_tool_name("run_a.b"));
        assert!(!valid_tool_name(&"x".repeat(65)));
    }
}
