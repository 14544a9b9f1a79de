mod support;

mod check;
mod plan;
mod run;
