// One log format for the worker and the operator: pino JSON with string
// levels ("level":"warn", not 40) and ISO times, as log pipelines and people
// read them, and errors logged whole under `err` (type, message, stack).
import pino, { type DestinationStream, type Logger } from 'pino';

/** To stdout, or to `destination` (tests read what would be printed). */
export function createLogger(
  o: { level?: string; redact?: string[] } = {},
  destination?: DestinationStream,
): Logger {
  const options = {
    level: o.level ?? process.env.LOG_LEVEL ?? 'info',
    formatters: { level: (label: string) => ({ level: label }) },
    timestamp: pino.stdTimeFunctions.isoTime,
    serializers: { err: pino.stdSerializers.err },
    ...(o.redact && { redact: o.redact }),
  };
  return destination ? pino(options, destination) : pino(options);
}
