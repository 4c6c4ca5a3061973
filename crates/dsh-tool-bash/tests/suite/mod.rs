mod background;
mod escalation;
mod fixture;
mod ownership;
mod rendering;
mod schemas;
mod validation;
