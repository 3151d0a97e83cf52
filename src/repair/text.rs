//! The forecast as text for a person.

use std::io::{self, Write};

use super::forecast::{Forecast, NodeForecast, Scope, Unhealthy, Verdict};
use crate::report::Report;

impl Report for Forecast {
    fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        let repair = if self.node_repair { "on" } else { "off" };
        writeln!(
            out,
            "Karpenter {} node repair {repair}; now {}; {} of {} node(s) will be replaced.",
            self.karpenter,
            self.now,
            self.will_be_replaced,
            self.nodes.len()
        )?;
        if self.scope == Scope::NodeList {
            writeln!(
                out,
                "The nodes given are taken as the whole cluster for the 20% rule."
            )?;
        }
        writeln!(out, "EKS node monitoring agent {}.", self.agent.describe())?;
        if let Some(assumption) = &self.agent.assumption {
            writeln!(out, "Assumption: {assumption}.")?;
        }
        for node in &self.nodes {
            writeln!(out)?;
            write_node(node, out)?;
        }
        Ok(())
    }
}

fn write_node(node: &NodeForecast, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "{}: {}", node.name, headline(node))?;
    let describe = [
        node.nodepool.as_ref().map(|p| format!("nodepool {p}")),
        node.ec2nodeclass
            .as_ref()
            .map(|c| format!("ec2nodeclass {c}")),
        node.instance_type.clone(),
        node.arch.clone(),
    ];
    let describe: Vec<String> = describe.into_iter().flatten().collect();
    if !describe.is_empty() {
        writeln!(out, "  node:        {}", describe.join(", "))?;
    }
    if let Some(trigger) = &node.trigger {
        writeln!(out, "  trigger:     {}", condition_line(trigger))?;
        writeln!(
            out,
            "  toleration:  {} -> termination at {} ({})",
            human(trigger.toleration_seconds as i64),
            trigger.termination_time,
            time_left(trigger.seconds_left)
        )?;
    }
    // The trigger is also in `unhealthy`; list the others.
    let is_trigger = |u: &Unhealthy| {
        node.trigger
            .as_ref()
            .is_some_and(|t| t.condition == u.condition && t.status == u.status)
    };
    for other in node.unhealthy.iter().filter(|u| !is_trigger(u)) {
        writeln!(out, "  also:        {}", condition_line(other))?;
    }
    if let Some(monitored) = node.gpu_monitored {
        let how = if monitored {
            "monitored by the agent's DCGM checks"
        } else {
            "NOT monitored (the agent skips DCGM here)"
        };
        writeln!(out, "  gpu health:  {how}")?;
    }
    if let Some(group) = &node.group {
        let outcome = if group.blocked {
            "repair blocked"
        } else {
            "within the limit"
        };
        writeln!(out, "  20% rule:    {} -> {outcome}", group.arithmetic())?;
    }
    for note in &node.notes {
        writeln!(out, "  note:        {note}")?;
    }
    let mut seen = Vec::new();
    for unhealthy in &node.unhealthy {
        let advice = &unhealthy.advice;
        if seen.contains(&advice.key) {
            continue;
        }
        seen.push(advice.key);
        writeln!(out, "  cause ({}):", advice.key)?;
        for line in &advice.cause {
            writeln!(out, "    - {line}")?;
        }
        writeln!(out, "  fix:")?;
        for (index, line) in advice.fixes.iter().enumerate() {
            writeln!(out, "    {}. {line}", index + 1)?;
        }
    }
    if !node.events.is_empty() {
        writeln!(out, "  events:")?;
        for event in &node.events {
            let when = event.time.as_deref().unwrap_or("(no time)");
            let kind = event.kind.as_deref().unwrap_or("-");
            let reason = event.reason.as_deref().unwrap_or("-");
            let source = event.source.as_deref().unwrap_or("-");
            let count = event
                .count
                .filter(|c| *c > 1)
                .map(|c| format!(" (x{c})"))
                .unwrap_or_default();
            let message = event.message.as_deref().unwrap_or("");
            writeln!(
                out,
                "    {when} {kind} {reason} [{source}]{count}: {message}"
            )?;
        }
    }
    Ok(())
}

fn headline(node: &NodeForecast) -> String {
    let verdict = node.verdict.as_str();
    match (&node.verdict, &node.trigger) {
        (Verdict::WillBeReplaced, Some(t)) if t.overdue => {
            format!(
                "{verdict}, overdue since {} ({})",
                t.termination_time,
                time_left(t.seconds_left)
            )
        }
        (Verdict::WillBeReplaced, Some(t)) => {
            format!(
                "{verdict} at {} ({})",
                t.termination_time,
                time_left(t.seconds_left)
            )
        }
        (Verdict::RepairBlocked, Some(t)) => format!(
            "{verdict} (toleration ends at {}, {}; the group is over the 20% limit)",
            t.termination_time,
            time_left(t.seconds_left)
        ),
        (Verdict::RepairDisabled, Some(_)) => {
            format!("{verdict}: node repair is off, nothing will happen to this node")
        }
        (Verdict::NotManaged, _) => {
            format!("{verdict}: not a Karpenter node, node repair never touches it")
        }
        _ => verdict.to_owned(),
    }
}

fn condition_line(u: &Unhealthy) -> String {
    let mut line = format!("{}={} since {}", u.condition, u.status, u.since);
    if let Some(reason) = &u.reason {
        line.push_str(&format!(", reason {reason}"));
    }
    if let Some(message) = &u.message {
        line.push_str(&format!(": \"{message}\""));
    }
    line
}

fn time_left(seconds: i64) -> String {
    if seconds > 0 {
        format!("{} left", human(seconds))
    } else if seconds == 0 {
        "due now".to_owned()
    } else {
        format!("overdue by {}", human(-seconds))
    }
}

/// `7m30s`, `10m`, `1h2m`, `2d3h`, `0s`: the largest units, zeros left out.
pub fn human(seconds: i64) -> String {
    let seconds = seconds.unsigned_abs();
    if seconds == 0 {
        return "0s".to_owned();
    }
    let parts = [
        (seconds / 86_400, "d"),
        (seconds % 86_400 / 3_600, "h"),
        (seconds % 3_600 / 60, "m"),
        (seconds % 60, "s"),
    ];
    parts
        .iter()
        .filter(|(value, _)| *value > 0)
        .map(|(value, unit)| format!("{value}{unit}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_people_write_them() {
        let cases = [
            (0, "0s"),
            (59, "59s"),
            (450, "7m30s"),
            (600, "10m"),
            (3_720, "1h2m"),
            (97_200, "1d3h"),
            (-180, "3m"),
        ];
        for (seconds, text) in cases {
            assert_eq!(human(seconds), text, "{seconds}");
        }
        assert_eq!(time_left(450), "7m30s left");
        assert_eq!(time_left(-180), "overdue by 3m");
    }
}
