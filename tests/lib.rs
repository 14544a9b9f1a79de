mod support;

mod check;
mod explain;
mod plan;
mod run;
