//! Prints the whole chapter plan (what `folio plan` shows with no arguments).
fn main() {
    let outs = folio_plan::run_all(&folio_plan::PlanInput::chapter()).expect("chapter plan");
    print!("{}", folio_plan::render(&outs));
}
