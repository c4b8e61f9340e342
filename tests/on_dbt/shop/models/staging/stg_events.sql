{{ config(event_time='event_time') }}

select event_id, customer_id, cast(event_time as timestamp) as event_time, kind, amount
from {{ source('app', 'raw_events') }}
