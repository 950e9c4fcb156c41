// Times as status and annotations carry them: RFC 3339 in whole seconds, as
// Kubernetes writes its own (metav1.Time).
export const iso = (d: Date) => d.toISOString().replace(/\.\d{3}Z$/, 'Z');
