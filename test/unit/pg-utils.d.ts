// pg's own parameter encoder, which the worker's array literals must match (worker-pure.test.ts).
declare module 'pg/lib/utils.js' {
  const utils: { prepareValue(value: unknown): unknown };
  export default utils;
}
