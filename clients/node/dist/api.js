// The socket API's bodies and codes, written by hack/tsapi from its OpenAPI
// document (clients/go/lockapi/openapi.json). Do not edit: make node-api.
/** Every error code of the API: the code of a BatonError. */
export const Codes = [
    "already_running",
    "wait_timeout",
    "already_done",
    "fence_mismatch",
    "limit_mismatch",
    "lock_delayed",
    "not_held",
    "not_owner",
    "lock_lost",
    "unavailable",
    "etcd_permission_denied",
    "etcd_rewound",
    "etcd_no_space",
    "etcd_corrupt",
    "forbidden",
    "too_many_waiters",
    "invalid_key",
    "invalid_owner",
    "invalid_ttl",
    "invalid_wait",
    "invalid_max_hold",
    "invalid_mode",
    "invalid_limit",
    "invalid_weight",
    "invalid_lock_delay",
    "invalid_value",
    "invalid_json",
    "invalid_request",
    "body_too_large",
    "body_timeout",
    "not_found",
    "method_not_allowed",
    "internal",
];
/** The events of a hold stream. */
export const HoldEvents = [
    "queued",
    "granted",
    "heartbeat",
    "lost",
    "released",
    "refused",
    "error",
];
/** Why a held lock was lost, as a lost event says. */
export const LostReasons = [
    "expired",
    "lease_lost",
    "force_released",
    "shutdown",
    "max_hold",
    "etcd_rewound",
];
