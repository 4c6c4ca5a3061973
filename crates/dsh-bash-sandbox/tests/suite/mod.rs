mod background;
mod classification;
mod containment;
mod fixture;
mod full_output;
mod wrapping;
