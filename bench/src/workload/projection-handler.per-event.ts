// The projection handler without its batch form: what a consumer whose module has only a default export does
// (one statement per event, in the task's shared transaction). The consumer scenario measures both.
export { default } from './projection-handler.ts';
