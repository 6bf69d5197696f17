// CPU time per role, the currency of a two-core machine: each process's own user + system time from
// /proc/<pid>/stat, and the whole machine's busy time from /proc/stat, so a run can say what one event costs in
// the relay, the consumer, the producer (this process) and everything else (PostgreSQL, Kafka, Redis, the OS).
import { readFileSync } from 'node:fs';

/** Linux reports these in clock ticks; USER_HZ is 100 on every mainstream kernel build. */
const TICKS_PER_SECOND = 100;

/** User + system CPU seconds of a process so far (its threads included); null once it is gone. */
export function processCpuSeconds(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name, which is in parentheses and may hold spaces.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND;
  } catch {
    return null;
  }
}

/** CPUs the kernel counts in /proc/stat (the `cpuN` lines): what the machine's idle share is a share of. */
export function machineCpuCount(): number {
  return readFileSync('/proc/stat', 'utf8')
    .split('\n')
    .filter((l) => /^cpu\d+ /.test(l)).length;
}

/** Busy CPU seconds of the whole machine so far, summed over its cores (everything but idle and iowait). */
export function machineCpuSeconds(): number {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
  const [, user, nice, system, idle, iowait, irq, softirq, steal] = line.trim().split(/\s+/).map(Number);
  void idle;
  void iowait;
  return (user! + nice! + system! + irq! + softirq! + steal!) / TICKS_PER_SECOND;
}

export interface CpuMeter {
  /** CPU microseconds per event since the meter started, per role and for the rest of the machine. */
  perEvent(events: number): CpuPerEvent;
}

export interface CpuPerEvent {
  relay: number | null;
  consumer: number | null;
  producer: number | null;
  /** The machine's busy time not spent in the roles above: PostgreSQL, Kafka, Redis, the kernel. */
  rest: number;
  machine: number;
}

/** Starts counting CPU for the given role processes (and this process as the producer, when asked). */
export function startCpuMeter(roles: { relay?: number; consumer?: number; producer?: boolean }): CpuMeter {
  const at = (pid: number | undefined) => (pid === undefined ? null : processCpuSeconds(pid));
  const self = () => {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1e6;
  };
  const start = {
    relay: at(roles.relay),
    consumer: at(roles.consumer),
    producer: self(),
    machine: machineCpuSeconds(),
  };
  return {
    perEvent(events) {
      const us = (seconds: number) => (events > 0 ? (seconds * 1e6) / events : 0);
      const delta = (pid: number | undefined, from: number | null) => {
        const now = at(pid);
        return now === null || from === null ? null : now - from;
      };
      const relay = delta(roles.relay, start.relay);
      const consumer = delta(roles.consumer, start.consumer);
      const producer = roles.producer ? self() - start.producer : null;
      const machine = machineCpuSeconds() - start.machine;
      const rest = machine - (relay ?? 0) - (consumer ?? 0) - (producer ?? 0);
      return {
        relay: relay === null ? null : us(relay),
        consumer: consumer === null ? null : us(consumer),
        producer: producer === null ? null : us(producer),
        rest: us(Math.max(0, rest)),
        machine: us(machine),
      };
    },
  };
}

/** "relay 120 µs, consumer 340 µs, producer 90 µs, rest 800 µs (machine 1,350 µs)" */
export function describeCpu(c: CpuPerEvent): string {
  const f = (n: number | null) => (n === null ? 'n/a' : `${Math.round(n).toLocaleString('en-US')} µs`);
  const parts = [`relay ${f(c.relay)}`, `consumer ${f(c.consumer)}`];
  if (c.producer !== null) parts.push(`producer ${f(c.producer)}`);
  return `CPU per event: ${parts.join(', ')}, rest ${f(c.rest)} (machine ${f(c.machine)})`;
}
