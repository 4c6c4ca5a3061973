mod background;
mod escalation;
mod fixture;
mod ownership;
mod rendering;
mod sandboxed;
mod schemas;
mod validation;
