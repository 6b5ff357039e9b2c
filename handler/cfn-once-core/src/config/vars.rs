//! Reading one variable: trimmed, empty as unset, a number within its range, a flag, a list;
//! each problem kept, so every missing or malformed variable is named in one error.

pub(super) struct Vars<'a> {
    pub(super) lookup: &'a dyn Fn(&str) -> Option<String>,
    pub(super) problems: &'a mut Vec<String>,
}

impl Vars<'_> {
    pub(super) fn get(&self, name: &str) -> Option<String> {
        (self.lookup)(name).map(|value| value.trim().to_owned()).filter(|value| !value.is_empty())
    }

    pub(super) fn required(&mut self, name: &str, what: &str) -> String {
        self.get(name).unwrap_or_else(|| {
            self.problems.push(format!("{name} is not set: set it to {what}"));
            String::new()
        })
    }

    pub(super) fn list(&self, name: &str) -> Vec<String> {
        self.get(name)
            .map(|value| value.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
            .unwrap_or_default()
    }

    pub(super) fn flag(&mut self, name: &str, default: bool) -> bool {
        match self.get(name).map(|raw| raw.to_ascii_lowercase()) {
            None => default,
            Some(raw) if raw == "true" => true,
            Some(raw) if raw == "false" => false,
            Some(raw) => {
                self.problems.push(format!("{name} is {raw:?}: expected true or false"));
                default
            }
        }
    }

    pub(super) fn number(&mut self, name: &str, default: u64, min: u64, max: u64) -> u64 {
        let Some(raw) = self.get(name) else {
            return default;
        };
        match raw.parse::<u64>() {
            Ok(value) if (min..=max).contains(&value) => value,
            _ => {
                self.problems.push(format!("{name} is {raw:?}: expected a whole number from {min} to {max}"));
                default
            }
        }
    }
}
