//! Prints the whole reference plan (what `folio plan` shows with no arguments).
fn main() {
    let outs = folio_plan::run_all(&folio_plan::PlanInput::reference()).expect("reference plan");
    print!("{}", folio_plan::render(&outs));
}
