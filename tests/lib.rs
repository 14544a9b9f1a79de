mod support;

mod check;
mod explain;
mod models;
mod plan;
mod run;
