-- Microbatch: twice runs it once per day with --event-time-start/--event-time-end; dbt filters
-- ref('raw_events') (which declares event_time) to the batch and replaces the batch's rows
-- (delete + insert in one transaction, dbt-duckdb's microbatch strategy).
-- TWICE_DBT_EXAMPLE_SLOW_DAY (YYYY-MM-DD, unset by default) makes that day's post-hook, inside
-- the model's transaction, take a long while: tests/on_dbt uses it to kill dbt mid-model.
{{ config(
    materialized='incremental',
    incremental_strategy='microbatch',
    event_time='event_time',
    batch_size='day',
    begin='2026-11-01',
    post_hook="{% if var('twice_start', '')[:10] == env_var('TWICE_DBT_EXAMPLE_SLOW_DAY', 'none') %}select count(*) from range(5000000000) a, range(4) b where a.range * b.range = -1{% endif %}",
) }}

select
    event_id,
    event_time,
    user_id,
    kind,
    amount,
    case when kind = 'refund' then -abs(amount) else amount end as signed_amount
from {{ ref('raw_events') }}
