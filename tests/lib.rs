mod support;

mod check;
mod context_update;
mod explain;
mod models;
mod overlay;
mod plan;
mod run;
