mod support;

mod check;
mod explain;
mod models;
mod overlay;
mod plan;
mod run;
