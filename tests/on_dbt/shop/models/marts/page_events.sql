-- Microbatch: dbt filters ref('stg_events') (which declares event_time) to the batch and
-- replaces the batch's rows.
{{ config(
    materialized='incremental',
    incremental_strategy='microbatch',
    event_time='event_time',
    batch_size='day',
    begin='2026-11-01',
) }}

select event_id, customer_id, event_time, kind, amount
from {{ ref('stg_events') }}
