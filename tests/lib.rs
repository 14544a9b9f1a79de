mod support;

mod ask;
mod action;
mod check;
mod claude_code;
mod compound;
mod context_update;
mod diagnostics;
mod explain;
mod finally;
mod models;
mod overlay;
mod plan;
mod records;
mod refresh;
mod reliability;
mod run;
