mod background;
mod classification;
mod containment;
mod fixture;
mod wrapping;
