/**
 * Why the local stack could not be brought up, checked or stopped. The `code` lets callers (tests, the CLI)
 * tell a missing prerequisite from a busy port without parsing messages; the message always says what to do.
 */
export type StackErrorCode =
  | 'prerequisite_missing'
  | 'port_taken'
  | 'start_failed'
  | 'start_timeout'
  | 'not_answering'
  | 'command_failed'
  | 'stop_failed'
  | 'locked'
  | 'bad_config';

export class StackError extends Error {
  readonly code: StackErrorCode;

  constructor(code: StackErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}
